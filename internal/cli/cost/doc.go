// Package cost is `gpuplane cost`: GPU-hours per namespace, queue, pod or
// node over a window, from the series gpuplane-agent exports and
// Prometheus keeps. It reads three series and decides nothing itself:
//
//   - container_gpu_allocation, the part of a physical GPU each container
//     holds (1 per whole GPU, a MIG device's slices over its GPU's, a
//     replica's or a fraction's share), the name OpenCost also reads;
//   - gpuplane_pod_queue_info, the Queue gpuplane-scheduler recorded on
//     each pod it bound (gpupod.QueueAnnotation), joined on namespace and
//     pod for --by queue;
//   - gpuplane_gpu_idle_share, the part of each GPU nobody holds, for the
//     idle GPU-hours and, counted, the GPU-hours the cluster had.
//
// A GPU-hour is one physical GPU held for an hour. Each series is sampled
// every --resolution over the window with a PromQL subquery, so a pod
// counts for the steps at which Prometheus saw it, whatever its scrape
// interval: GPU-hours = sum over steps of the share x resolution. The
// error is at most one step at each end of a pod's life.
//
// Prometheus's answers are read as untrusted: a body over maxBody bytes,
// an answer that is not an instant vector, or a value that is not a
// finite number is an error that says so, never a panic or a silent zero.
package cost
