package v1alpha1

import "fmt"

// MovableAnnotation opts workloads in to being moved to defragment: the
// scheduler may evict a running group and start it again elsewhere, in the
// same decision, so that a gang waiting only because free GPUs are
// scattered can start. Set "true" on a PodGroup or on its pods (a
// restartable, checkpointing workload), or on a Queue for every workload
// submitted to it; "false" on a workload keeps it in place whatever its
// queue says. Any other value is refused, naming the annotation.
const MovableAnnotation = "scheduling.gpuplane.io/movable"

// ParseMovable reads MovableAnnotation from annotations: whether it is set
// and what it says.
func ParseMovable(annotations map[string]string) (movable, set bool, err error) {
	v, ok := annotations[MovableAnnotation]
	if !ok {
		return false, false, nil
	}
	switch v {
	case "true":
		return true, true, nil
	case "false":
		return false, true, nil
	}
	return false, false, fmt.Errorf("metadata.annotations[%s]: want \"true\" or \"false\", got %q", MovableAnnotation, v)
}
