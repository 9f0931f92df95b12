// Package health decides whether each GPU and MIG device is healthy. It
// reads critical XID and ECC events from the GPU backend's event
// subscription, ignores the XIDs NVIDIA's plugin ignores by default (13,
// 31, 43, 45, 68, 109) under the same DP_DISABLE_HEALTHCHECKS and
// DP_ENABLE_HEALTHCHECKS overrides, polls every GPU so that one that falls
// off the bus is noticed, and returns a device to Healthy once it has gone a
// probation time without a critical event and answers the backend again.
//
// When the event subscription cannot start or keeps failing, the Monitor
// says so loudly: an error log, Status().Monitoring false with the reason,
// and the gpuplane_health_monitor_up gauge at 0. It never reports devices
// as watched when they are not.
//
// It must not talk to the kubelet; the device plugin reads Healthy and
// listens for changes.
package health
