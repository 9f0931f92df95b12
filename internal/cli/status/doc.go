// Package status implements `gpuplane status`: a read-only summary of the
// cluster's GPUs (per node, with who holds which GPU), its scheduling
// queues (usage against guarantee, limit and fair share) and the pod groups
// that wait, with the reason gpuplane-scheduler gave. It reads the API
// server only; it must never write to it.
package status
