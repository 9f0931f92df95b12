// Package framework is what gpuplane's integration tests stand on: one real
// control plane (internal/localcluster) per test package, started from
// TestMain through Main; kwok presets of internal/testutil/build's GPU node
// and pod builders; and waiting helpers that poll the API server with a
// deadline.
//
// It must not imitate any Kubernetes component: everything the tests see
// comes from the real API server, controller-manager and kwok. It must not be
// imported by product code.
package framework
