// Package apifeatures names the optional Kubernetes APIs gpuplane uses
// (DRA, the Workload API, MutatingAdmissionPolicy) and finds out, through
// the API server's discovery, which of them a cluster serves and at which
// version. gpuplane supports Kubernetes 1.34 to 1.37, and these APIs come
// and go across that range (or sit behind feature gates): a part that
// needs one is turned off where it is missing, with the reason this
// package gives, rather than failing or watching an API that is not there.
//
// It only looks up and describes; it must not decide what a part does
// when an API is missing (that is the scheduler's, the agent's and the
// CLI's own wiring).
package apifeatures
