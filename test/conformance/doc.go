// Package conformance holds tests that drive gpuplane's node parts with the
// kubelet's own code (k8s.io/kubernetes v1.36.3) over real unix sockets,
// against the simulated GPU backend:
//
//   - the device plugin, through the kubelet's device manager
//     (pkg/kubelet/cm/devicemanager). The manager always uses
//     /var/lib/kubelet/device-plugins, so the tests re-run themselves in a
//     private mount namespace with a tmpfs over /var/lib; where that is not
//     possible they skip and say why.
//   - the DRA driver (internal/dra, built as the agent's --dra part builds
//     it), through the kubelet's plugin manager (pkg/kubelet/pluginmanager,
//     which finds the driver by its registration socket) and DRA manager
//     (pkg/kubelet/cm/dra, which prepares and unprepares pods' claims and
//     checkpoints them). Both read ResourceClaims from a real kube-apiserver:
//     the first DRA test starts etcd and kube-apiserver from
//     $GPUPLANE_CONTROLPLANE_BIN (or bin/) for the package, and skips when
//     they are missing unless GPUPLANE_INTEGRATION=1, which `make
//     test-conformance` sets. Their directories are per test, so they need no
//     mount namespace.
//
// It has no code of its own to ship.
package conformance
