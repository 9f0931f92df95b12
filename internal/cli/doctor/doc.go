// Package doctor is `gpuplane doctor`: why a pod has no GPU, or why a node
// offers none, from the cluster's own objects. It renders what the other
// parts recorded (the scheduler's PodScheduled condition and events, a
// PodGroup's and a Queue's status, the agent's labels and its GPUReady and
// GPUQuarantine conditions, the node's resources and its record of what
// pods hold) and names the command that fixes each finding. It decides
// nothing itself: a reason the scheduler gave is shown in its words, never
// worked out again.
package doctor
