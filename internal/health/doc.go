// Package health decides whether each GPU and MIG device is healthy. It
// reads critical XID and ECC events from the GPU backend's event
// subscription, ignores the XIDs NVIDIA's plugin ignores by default (13,
// 31, 43, 45, 68, 109) under the same DP_DISABLE_HEALTHCHECKS and
// DP_ENABLE_HEALTHCHECKS overrides, polls every GPU so that one that falls
// off the bus is noticed, and returns a device to Healthy once it has gone a
// probation time without a critical event and answers the backend again.
//
// Faults passes every critical event on (a double-bit ECC error as XID
// 48, a GPU a probe finds off the bus as XID 79) to the quarantine, which
// Holds a GPU it takes out of service: a held GPU and its MIG devices stay
// unhealthy whatever the probation says, until Release.
//
// When the event subscription cannot start or keeps failing, the Monitor
// says so loudly: an error log and Status().Monitoring false with the
// reason, which the agent's exporter serves as gpuplane_health_monitor_up 0
// with that reason. It never reports devices as watched when they are not.
//
// It must not talk to the kubelet; the device plugin reads Healthy and
// listens for changes.
package health
