// Package reasons is the catalogue of what gpuplane writes on objects to say
// how they stand: the condition types it keeps, the reasons of those
// conditions and the reasons of the events it records, each with the object
// it is written on and the process that writes it. Every entry has an anchor
// in docs/troubleshooting.md that says what it means and what to do;
// URL gives its address, so that events and `gpuplane doctor` can point
// there.
//
// The catalogue is part of the contract between gpuplane and its users'
// tooling (alerts on event reasons, dashboards on conditions). A test scans
// the sources for the reasons they write and fails on one missing here, and
// the docs tests fail on an entry without its anchor.
//
// This package must not depend on anything under internal/.
package reasons

import (
	"strings"

	"github.com/gpuplane/gpuplane/api/gpunode"
	"github.com/gpuplane/gpuplane/api/scheduling/v1alpha1"
)

// DocsURL is the troubleshooting page, which has an entry for every name
// in All.
const DocsURL = "https://github.com/gpuplane/gpuplane/blob/main/docs/troubleshooting.md"

// Kind says what a name is.
type Kind string

// The kinds of names gpuplane writes.
const (
	// ConditionType is the type of a condition gpuplane keeps.
	ConditionType Kind = "condition"
	// ConditionReason is the reason of a condition (Condition names it).
	ConditionReason Kind = "condition reason"
	// Event is the reason of an event.
	Event Kind = "event"
)

// The processes that write them.
const (
	Scheduler = "gpuplane-scheduler"
	Agent     = "gpuplane-agent"
)

// Reason is one name gpuplane writes.
type Reason struct {
	Name string
	Kind Kind
	// Object is the kind of object it is written on.
	Object string
	// Condition is the condition type of a ConditionReason.
	Condition string
	// By is the process that writes it.
	By string
	// Anchor is the entry's anchor in DocsURL's page when it is not the
	// lower-cased Name (several names share one entry).
	Anchor string
}

// Slug is the anchor of the reason's entry.
func (r Reason) Slug() string {
	if r.Anchor != "" {
		return r.Anchor
	}
	return strings.ToLower(r.Name)
}

// URL is the address of the entry for name, or of the page when name is
// not in the catalogue.
func URL(name string) string {
	for _, r := range All {
		if r.Name == name {
			return DocsURL + "#" + r.Slug()
		}
	}
	return DocsURL
}

// MaxEventMessage is the longest event message the API server keeps whole
// (events.k8s.io's note).
const MaxEventMessage = 1024

// WithDocs ends an event's message with the address of its reason's
// troubleshooting entry, shortening the message rather than the address
// when the two would not fit in one event. A reason not in the catalogue
// leaves the message as it is.
func WithDocs(reason, msg string) string {
	if !Known(reason) {
		return msg
	}
	suffix := " (see " + URL(reason) + ")"
	if room := MaxEventMessage - len(suffix); len(msg) > room {
		msg = strings.ToValidUTF8(msg[:max(0, room-3)], "") + "..."
	}
	return msg + suffix
}

// Known reports whether name is in the catalogue.
func Known(name string) bool {
	for _, r := range All {
		if r.Name == name {
			return true
		}
	}
	return false
}

// podScheduled is the Pod condition kube-scheduler and gpuplane-scheduler
// keep.
const podScheduled = "PodScheduled"

// waits are reasons a pod waits: its PodScheduled condition's, its event's
// and, for a pod of a PodGroup, the group's Schedulable condition's.
func waits(names ...string) []Reason {
	var out []Reason
	for _, n := range names {
		out = append(out,
			Reason{Name: n, Kind: ConditionReason, Object: "Pod", Condition: podScheduled, By: Scheduler},
			Reason{Name: n, Kind: Event, Object: "Pod", By: Scheduler},
			Reason{Name: n, Kind: ConditionReason, Object: "PodGroup", Condition: v1alpha1.ConditionSchedulable, By: Scheduler})
	}
	return out
}

func groupWaits(names ...string) []Reason {
	var out []Reason
	for _, n := range names {
		out = append(out, Reason{Name: n, Kind: ConditionReason, Object: "PodGroup", Condition: v1alpha1.ConditionSchedulable, By: Scheduler})
	}
	return out
}

func agentReasons(object, condition string, names ...string) []Reason {
	var out []Reason
	for _, n := range names {
		out = append(out, Reason{Name: n, Kind: ConditionReason, Object: object, Condition: condition, By: Agent})
	}
	return out
}

func events(object, by string, names ...string) []Reason {
	var out []Reason
	for _, n := range names {
		out = append(out, Reason{Name: n, Kind: Event, Object: object, By: by})
	}
	return out
}

// migReasons are the reasons of the MIGConfigApplied condition; the agent
// also records each as a Node event named MIGConfig<reason>.
var migReasons = []string{
	gpunode.ReasonMIGApplied, gpunode.ReasonMIGEvicting, gpunode.ReasonMIGApplying,
	gpunode.ReasonMIGEvictionBlocked, gpunode.ReasonMIGInvalidConfig, gpunode.ReasonMIGRolledBack,
	gpunode.ReasonMIGModePending, gpunode.ReasonMIGApplyFailed, gpunode.ReasonMIGProposalWaiting,
}

// MIGEventPrefix begins the reason of each Node event the agent records
// when a MIGConfigApplied condition changes.
const MIGEventPrefix = "MIGConfig"

// All is the catalogue, by the object it is written on.
var All = concat(
	// Conditions.
	[]Reason{
		{Name: gpunode.ConditionGPUReady, Kind: ConditionType, Object: "Node", By: Agent},
		{Name: gpunode.ConditionGPUQuarantine, Kind: ConditionType, Object: "Node", By: Agent},
		{Name: gpunode.ConditionMIGConfig, Kind: ConditionType, Object: "Node", By: Agent},
		{Name: v1alpha1.ConditionSchedulable, Kind: ConditionType, Object: "PodGroup", By: Scheduler},
		{Name: v1alpha1.ConditionValid, Kind: ConditionType, Object: "Queue, GroupingRule", By: Scheduler},
		{Name: v1alpha1.ConditionPreemptionNotice, Kind: ConditionType, Object: "Pod", By: Scheduler},
	},
	// A victim's notice: why it is evicted.
	[]Reason{
		{Name: "Preempt", Kind: ConditionReason, Object: "Pod", Condition: v1alpha1.ConditionPreemptionNotice, By: Scheduler, Anchor: "preemptionnotice"},
		{Name: "Reclaim", Kind: ConditionReason, Object: "Pod", Condition: v1alpha1.ConditionPreemptionNotice, By: Scheduler, Anchor: "preemptionnotice"},
		{Name: "NodeDisruption", Kind: ConditionReason, Object: "Pod", Condition: v1alpha1.ConditionPreemptionNotice, By: Scheduler, Anchor: "preemptionnotice"},
	},
	// Why a pod waits: its PodScheduled condition and an event of the
	// same reason (FailedScheduling for Unschedulable).
	waits(
		"Unschedulable", "WaitingForPreemption", "InvalidTopology", "QueueLimit",
		"ExceedsQueueLimit",
		"UnknownQueue", "QueueNotLeaf", "QueueNotAllowed", "ConflictingQueues", "ConflictingPodGroups",
		"QueueMismatch", "PodGroupNotFound", "NotEnoughPods", "GroupingFailed", "InvalidPodGroup", "InvalidAnnotation",
		"InvalidQueue", "InvalidName", "TopologyMismatch",
		"RequestOutOfRange", "RequestsNotLimits", "UnknownMIGProfile", "FractionalGPU",
		"FractionOutOfRange", "FractionWithoutGPU", "FractionOfSeveralGPUs", "InvalidHostPort",
		"PodConstraintTooLarge", "UnsupportedVolume",
		"WaitingForResourceClaim", "ResourceClaimNotFound", "ResourceClaimNotOwned", "ResourceClaimDeleted",
		"ResourceClaimFull", "ClaimsOnDifferentNodes", "DeviceClassNotFound", "MixedGPURequest",
		"SelectorFailed", "InvalidSelector", "InvalidResourceClaim", "UnsupportedClaim", "TooManyDevices",
		"AdminAccessNotAllowed", "ClaimAllocationFailed", "NodesComing", "ExceedsNodePoolLimits",
	),
	[]Reason{{Name: "FailedScheduling", Kind: Event, Object: "Pod", By: Scheduler, Anchor: "unschedulable"}},
	// The core's codes only the PodGroup's Schedulable condition carries:
	// more nodes would start the group, so its pods say Unschedulable,
	// with the core's words.
	groupWaits("Placed", "Waiting", "DoesNotFit", "NoTopologyDomain", "TopologyDomainFragmented",
		"PreemptionDisabled", "ReclaimDisabled", "ExceedsClusterCapacity", "VictimsBelowMinRuntime"),
	// Queue and GroupingRule validity.
	[]Reason{
		{Name: "Valid", Kind: ConditionReason, Object: "Queue", Condition: v1alpha1.ConditionValid, By: Scheduler},
		{Name: "Compiled", Kind: ConditionReason, Object: "GroupingRule", Condition: v1alpha1.ConditionValid, By: Scheduler},
		{Name: "Invalid", Kind: ConditionReason, Object: "GroupingRule", Condition: v1alpha1.ConditionValid, By: Scheduler},
		{Name: "DuplicateTarget", Kind: ConditionReason, Object: "GroupingRule", Condition: v1alpha1.ConditionValid, By: Scheduler},
	},
	// What the scheduler did.
	events("Pod", Scheduler, v1alpha1.ConditionPreemptionNotice, "Preempted", "InvalidCheckpoint", "GangIncomplete", "FailedBinding", "FailedClaimAllocation"),
	events("PodGroup", Scheduler, "FailedCommit"),
	events("PriorityClass", Scheduler, "InvalidMinRuntime"),
	events("Node", Scheduler, "InvalidGPUInfo", "GPUTopologyIgnored", "GPUsNotRegistered"),
	// The agent's conditions.
	agentReasons("Node", gpunode.ConditionGPUReady,
		gpunode.ReasonAgentReady, gpunode.ReasonDriverNotLoaded, gpunode.ReasonNoGPUs,
		gpunode.ReasonDevicePluginNotRegistered, gpunode.ReasonHealthMonitorDown,
		gpunode.ReasonDeviceNodesMissing, gpunode.ReasonMIGModeChangePending, gpunode.ReasonCDISpecsMissing),
	agentReasons("Node", gpunode.ConditionGPUQuarantine,
		gpunode.ReasonNoGPUQuarantined, gpunode.ReasonGPUQuarantined, gpunode.ReasonGPUHeld),
	agentReasons("Node", gpunode.ConditionMIGConfig, migReasons...),
	migEvents(),
	// The quarantine's steps.
	events("Node", Agent, "GPUQuarantined", "GPUFailedAgain", "GPUPodEvicted", "GPUPodEvictionRefused",
		"GPUDrainTimedOut", "GPUDrained", "GPUReset", "GPUResetFailed", "GPUInventoryRefreshFailed",
		"GPUHeld", "GPURetry", "GPUReturned", "GPUQuarantineResumed"),
	// The agent's start: an optional API the cluster does not serve.
	events("Node", Agent, gpunode.EventReasonAPINotServed),
	// Pods the agent acted on.
	events("Pod", Agent, gpunode.EventReasonMIGEviction, "GPUMemoryOverLimit", "GPUNotGiven",
		"EvictedOverGPUMemoryLimit", "OverLimitEvictionRefused"),
)

func migEvents() []Reason {
	var out []Reason
	for _, r := range migReasons {
		out = append(out, Reason{Name: MIGEventPrefix + r, Kind: Event, Object: "Node", By: Agent, Anchor: strings.ToLower(r)})
	}
	return out
}

func concat(parts ...[]Reason) []Reason {
	var out []Reason
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}
