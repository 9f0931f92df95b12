package v1alpha1

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// Keys of the other schedulers' dialects that gpuplane-scheduler reads, so
// that pods written for them need no edit.
const (
	// KAIQueueLabel is KAI Scheduler's queue label.
	KAIQueueLabel = "kai.scheduler/queue"
	// VolcanoGroupAnnotation is Volcano's pod group annotation.
	VolcanoGroupAnnotation = "scheduling.k8s.io/group-name"
	// VolcanoQueueAnnotation is Volcano's queue annotation on pods.
	VolcanoQueueAnnotation = "scheduling.volcano.sh/queue-name"
)

// Key is one label or annotation through which a pod names its group or
// its queue.
type Key struct {
	Name       string
	Annotation bool
}

func (k Key) String() string {
	if k.Annotation {
		return "annotation " + k.Name
	}
	return "label " + k.Name
}

func (k Key) value(labels, annotations map[string]string) string {
	if k.Annotation {
		return annotations[k.Name]
	}
	return labels[k.Name]
}

// GroupKeys are the keys that name a pod's PodGroup, in precedence order:
// gpuplane's own, then scheduler-plugins', then Volcano's. A PodGroup
// derived from the pod's owner (a Job, a JobSet, ...) is used only when a
// pod names none of these.
var GroupKeys = []Key{{Name: PodGroupLabel}, {Name: SchedulerPluginsPodGroupLabel}, {Name: VolcanoGroupAnnotation, Annotation: true}}

// QueueKeys are the keys that name a pod's Queue, in precedence order:
// gpuplane's own, then Kueue's, KAI's and Volcano's. The queue of the
// pod's PodGroup (spec.queue) comes before all of them, and the
// namespace's default queue after.
var QueueKeys = []Key{{Name: QueueLabel}, {Name: KueueQueueLabel}, {Name: KAIQueueLabel}, {Name: VolcanoQueueAnnotation, Annotation: true}}

// Named is the value a pod gives through one of a list of keys, and the
// key it came from; the zero Named means the pod names nothing.
type Named struct {
	Value string
	From  Key
}

// ConflictError says that a pod names two different values through two
// dialects.
type ConflictError struct {
	What string // "pod group" or "queue"
	A, B Named
}

func (e *ConflictError) Error() string {
	return fmt.Sprintf("%s names %s %q but %s names %q: remove one of them or make them agree",
		e.A.From, e.What, e.A.Value, e.B.From, e.B.Value)
}

// InvalidNameError says that a pod names a group or a queue by a value
// that cannot be an object's name.
type InvalidNameError struct {
	What string
	N    Named
	Why  string
}

func (e *InvalidNameError) Error() string {
	v := e.N.Value
	if len(v) > 64 {
		v = v[:64] + "..."
	}
	return fmt.Sprintf("%s %q is not a valid %s name: %s", e.N.From, v, e.What, e.Why)
}

// PodGroupName returns the PodGroup a pod with these labels and
// annotations names, by GroupKeys' precedence. Two keys naming different
// groups, or a value that cannot be a name, is an error: which one the pod
// meant is the user's to say.
func PodGroupName(labels, annotations map[string]string) (Named, error) {
	return resolve("pod group", GroupKeys, labels, annotations)
}

// PodQueueName returns the Queue a pod with these labels and annotations
// names, by QueueKeys' precedence, with the same errors as PodGroupName.
func PodQueueName(labels, annotations map[string]string) (Named, error) {
	return resolve("queue", QueueKeys, labels, annotations)
}

func resolve(what string, keys []Key, labels, annotations map[string]string) (Named, error) {
	var first Named
	for _, k := range keys {
		v := k.value(labels, annotations)
		if v == "" {
			continue
		}
		if first.Value == "" {
			// Object names are DNS subdomains: an annotation's value has no
			// other bound, so it is checked before it is used anywhere.
			if errs := validation.IsDNS1123Subdomain(v); len(errs) > 0 {
				return Named{}, &InvalidNameError{What: what, N: Named{Value: v, From: k}, Why: strings.Join(errs, "; ")}
			}
			first = Named{Value: v, From: k}
			continue
		}
		if v != first.Value {
			return Named{}, &ConflictError{What: what, A: first, B: Named{Value: v, From: k}}
		}
	}
	return first, nil
}
