// Package localcluster starts and stops a real, local Kubernetes cluster's
// control plane for integration tests, benchmarks and `gpuplane dev up`: etcd,
// kube-apiserver, kube-controller-manager, optionally kube-scheduler, and kwok
// playing the kubelet of fake nodes. The binaries come from the tools module
// (`make controlplane-bins` builds them into bin/); this package runs them as
// child processes on free loopback ports, with a temporary data directory,
// certificates and service-account keys it generates, and one kubeconfig per
// identity.
//
// It also starts the workload operators that `make operator-bins` builds
// into bin/operators (JobSet, Kubeflow's training operator, KubeRay) as
// processes beside that control plane, with the scaffolding their own
// installation would have made (StartOperator): the integration tests, the
// benchmarks and `gpuplane dev up --operators` share that one recipe.
//
// Every process runs in its own process group and receives SIGKILL when the
// process that started it dies, so a crashed or killed test leaves nothing
// behind; Stop waits for each process to exit before it returns.
//
// This package must not import k8s.io/kubernetes or imitate an API server: it
// only launches the real components and talks to them through client-go.
//
// It is not part of gpuplane as users install it: a real cluster brings its
// own control plane.
package localcluster
