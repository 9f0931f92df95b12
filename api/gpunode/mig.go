package gpunode

// Declarative MIG: the Node label that picks a layout from the agent's
// mig-parted ConfigMap, the label and condition that report progress, as
// NVIDIA's mig-manager names them where it has names.
const (
	// LabelMIGConfig names the config of the mig-parted ConfigMap the
	// node's GPUs are partitioned by ("all-1g.10gb", "all-balanced").
	LabelMIGConfig = LabelPrefix + "mig.config"
	// LabelMIGConfigState is the progress of LabelMIGConfig: one of the
	// MIGConfigState* values.
	LabelMIGConfigState = LabelPrefix + "mig.config.state"
)

// Values of LabelMIGConfigState.
const (
	MIGConfigStatePending = "pending"
	MIGConfigStateSuccess = "success"
	MIGConfigStateFailed  = "failed"
)

// ConditionMIGConfig is the Node condition that explains
// LabelMIGConfigState: True once the GPUs are in the layout the label
// names, False with one of the ReasonMIG* reasons and a message naming the
// GPU, the pod or the config field otherwise.
const ConditionMIGConfig = "MIGConfigApplied"

// EventReasonMIGEviction is the reason of the Event gpuplane-agent
// records on a pod it evicts because a GPU the pod holds is being
// re-partitioned.
const EventReasonMIGEviction = "MIGReconfiguration"

// Reasons of ConditionMIGConfig.
const (
	// ReasonMIGApplied: every GPU is in the chosen layout.
	ReasonMIGApplied = "Applied"
	// ReasonMIGEvicting: pods on the GPUs that change are being evicted.
	ReasonMIGEvicting = "EvictingPods"
	// ReasonMIGApplying: the layout is being applied.
	ReasonMIGApplying = "Applying"
	// ReasonMIGEvictionBlocked: a PodDisruptionBudget refused an eviction
	// until the eviction timeout; the GPUs keep their layout.
	ReasonMIGEvictionBlocked = "EvictionBlocked"
	// ReasonMIGInvalidConfig: the ConfigMap, the config the label names or
	// a layout in it is wrong for this node; the message names the field.
	// Nothing was evicted or changed.
	ReasonMIGInvalidConfig = "InvalidConfig"
	// ReasonMIGRolledBack: the driver refused the layout; the GPU is back
	// in its previous layout.
	ReasonMIGRolledBack = "RolledBack"
	// ReasonMIGModePending: a MIG mode change waits for a GPU reset.
	ReasonMIGModePending = ReasonMIGModeChangePending
	// ReasonMIGApplyFailed: a MIG call failed; the agent retries.
	ReasonMIGApplyFailed = "ApplyFailed"
)
