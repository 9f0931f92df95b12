// Package differential proves gpuplane-scheduler's feasibility decisions
// equal kube-scheduler's. It draws random clusters from seeds (nodes with
// labels, taints, allocatable and cordons, pods bound to them, pods
// waiting for gpuplane-scheduler) and compares, pod by pod, the nodes
// gpuplane finds feasible with the nodes kube-scheduler v1.36.3's own
// Filter plugins accept for the same state:
//
//   - kube-scheduler: the framework built from the in-tree registry with
//     the default profile of the default configuration, over an in-memory
//     snapshot of NodeInfos; PreFilter, then Filter on each node, as its
//     findNodesThatFitPod runs them.
//   - gpuplane: the adapter's view of the same objects (adapter.ViewOf:
//     the informers' transform, node conversion, predicate classes, pod
//     requests, running allocations), then the core's placement state with
//     the running allocations assigned, asked node by node
//     (placement.State.Why).
//
// Any difference fails, with the smallest case the test can shrink it to,
// as YAML, and both schedulers' verdict on each node. Which API fields the
// generator draws is a list of features (features_test.go: enabled);
// those gpuplane-scheduler does not keep yet are off. TestDifferential
// draws a fixed number of clusters in `make test`'s conformance tier;
// FuzzDifferential draws them from the fuzzer's seeds in the fuzz tier.
//
// It has no code of its own to ship.
package differential
