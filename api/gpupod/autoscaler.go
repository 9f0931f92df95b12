package gpupod

// Annotations gpuplane-scheduler writes with the binding of a pod that
// must keep its node against a node autoscaler's voluntary disruption
// (consolidation, the replacement of a drifted node): a member of a gang,
// or a pod on part of a GPU. A spot reclaim or a node's expiry still
// disrupts it.
const (
	// DoNotDisruptAnnotation "true" is Karpenter's: it does not drain the
	// pod's node on its own initiative.
	DoNotDisruptAnnotation = "karpenter.sh/do-not-disrupt"
	// SafeToEvictAnnotation "false" is Cluster Autoscaler's: it does not
	// remove the pod's node to scale down.
	SafeToEvictAnnotation = "cluster-autoscaler.kubernetes.io/safe-to-evict"
)
