package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupName is the API group of gpuplane's scheduling resources.
const GroupName = "scheduling.gpuplane.io"

// SchemeGroupVersion is this package's group and version.
var SchemeGroupVersion = schema.GroupVersion{Group: GroupName, Version: "v1alpha1"}

// AddToScheme registers this package's types with a scheme.
func AddToScheme(s *runtime.Scheme) error {
	s.AddKnownTypes(SchemeGroupVersion, &Queue{}, &QueueList{}, &PodGroup{}, &PodGroupList{}, &GroupingRule{}, &GroupingRuleList{}, &Topology{}, &TopologyList{})
	metav1.AddToGroupVersion(s, SchemeGroupVersion)
	return nil
}

// Labels and annotations by which pods and namespaces take part.
const (
	// QueueLabel names the Queue a pod (or its PodGroup) is submitted to.
	QueueLabel = "scheduling.gpuplane.io/queue"
	// PodGroupLabel names the PodGroup (in the pod's namespace) a pod
	// belongs to.
	PodGroupLabel = "scheduling.gpuplane.io/pod-group"
	// DefaultQueueAnnotation on a Namespace names the queue its pods go to
	// when they name none.
	DefaultQueueAnnotation = "scheduling.gpuplane.io/default-queue"
	// SchedulerPluginsPodGroupLabel is scheduler-plugins' pod group label,
	// accepted as an alias of PodGroupLabel.
	SchedulerPluginsPodGroupLabel = "scheduling.x-k8s.io/pod-group"
	// KueueQueueLabel is Kueue's queue label, accepted as an alias of
	// QueueLabel.
	KueueQueueLabel = "kueue.x-k8s.io/queue-name"
	// SchedulerName is what pods set in spec.schedulerName to be scheduled
	// by gpuplane-scheduler.
	SchedulerName = "gpuplane-scheduler"
	// SchedulingGate is the scheduling gate (spec.schedulingGates) gpuplane's
	// admission policy gives every pod created for gpuplane-scheduler.
	// gpuplane-scheduler removes it when it binds the pod, or when the pod
	// waits for room that more nodes would give (PodScheduled reason
	// Unschedulable); while the pod waits for its queue's quota, for its
	// gang's missing members or for the pods evicted for it, the gate
	// stays, so that autoscalers, which skip gated pods, buy no node for
	// it. The scheduler still counts a gated pod in its gang.
	SchedulingGate = "scheduling.gpuplane.io/queued"
)

// GroupVersionResources of the scheduling CRDs, for dynamic clients.
var (
	QueuesResource        = SchemeGroupVersion.WithResource("queues")
	PodGroupsResource     = SchemeGroupVersion.WithResource("podgroups")
	GroupingRulesResource = SchemeGroupVersion.WithResource("groupingrules")
	TopologiesResource    = SchemeGroupVersion.WithResource("topologies")
)

// Condition types gpuplane-scheduler writes.
const (
	// ConditionSchedulable on a PodGroup says whether the gang can be
	// placed and, when not, why.
	ConditionSchedulable = "Schedulable"
	// ConditionValid on a Queue or PodGroup says whether its spec is
	// usable and, when not, what to change.
	ConditionValid = "Valid"
)
