package metrics

import "github.com/prometheus/client_golang/prometheus"

// Series is one metric the Exporter can write, for the reference docs.
type Series struct {
	Desc *prometheus.Desc
	// Type is "gauge" or "counter".
	Type string
	// DCGM says which dcgm-exporter series it stands for: its own name for
	// the DCGM_FI_* series (the same name and labels, so queries and
	// dashboards carry over), the nearest one for gpuplane's own, or ""
	// when dcgm-exporter has none.
	DCGM string
}

// dcgmEquivalent is, for gpuplane's own series, the dcgm-exporter series
// nearest in meaning and how they differ; gpuplane series missing here
// have no counterpart in dcgm-exporter.
var dcgmEquivalent = map[string]string{
	"gpuplane_xid_errors_total":          "DCGM_FI_DEV_XID_ERRORS (the last XID as a gauge; this counts them)",
	"gpuplane_pod_gpu_utilization_ratio": "DCGM_FI_DEV_GPU_UTIL with its pod labels, for a GPU one pod holds (percent; this is a ratio, and splits a shared GPU between its pods)",
	"gpuplane_pod_gpu_memory_used_bytes": "DCGM_FI_DEV_FB_USED with its pod labels, for a GPU one pod holds (MiB; this is bytes, per pod on a shared GPU)",
	"gpuplane_device_healthy":            "none; DCGM's health watches (dcgmi health), which dcgm-exporter does not export",
}

// Reference lists every series the Exporter can write, each name once (a
// series written for whole GPUs and for MIG devices is listed with the
// whole GPU's labels).
func Reference() []Series {
	d := newDescs()
	var out []Series
	seen := map[string]bool{}
	add := func(desc *prometheus.Desc, typ prometheus.ValueType, name string, own bool) {
		if seen[name] {
			return
		}
		seen[name] = true
		s := Series{Desc: desc, Type: "gauge"}
		if typ == prometheus.CounterValue {
			s.Type = "counter"
		}
		if own {
			s.DCGM = dcgmEquivalent[name]
		} else {
			s.DCGM = name
		}
		out = append(out, s)
	}
	for _, f := range d.fields {
		add(f.desc, f.typ, f.name, f.own)
	}
	for _, pf := range d.prof {
		add(pf.migDesc, prometheus.GaugeValue, pf.name, false)
	}
	add(d.migFBUsed, prometheus.GaugeValue, "DCGM_FI_DEV_FB_USED", false)
	add(d.migFBFree, prometheus.GaugeValue, "DCGM_FI_DEV_FB_FREE", false)
	for _, o := range []struct {
		desc *prometheus.Desc
		name string
	}{
		{d.telemetryUp, "gpuplane_device_telemetry_up"},
		{d.podUtil, "gpuplane_pod_gpu_utilization_ratio"},
		{d.podMem, "gpuplane_pod_gpu_memory_used_bytes"},
		{d.podProcs, "gpuplane_pod_gpu_processes"},
		{d.podMemLimit, "gpuplane_pod_gpu_memory_limit_bytes"},
		{d.foreign, "gpuplane_gpu_unallocated_pod_processes"},
		{d.allocations, "gpuplane_device_allocations"},
		{d.containerShare, "container_gpu_allocation"},
		{d.queueInfo, "gpuplane_pod_queue_info"},
		{d.idleShare, "gpuplane_gpu_idle_share"},
		{d.unmapped, "gpuplane_pod_attribution_unmapped_processes"},
		{d.podResourcesUp, "gpuplane_podresources_up"},
		{d.checkpointUp, "gpuplane_kubelet_checkpoint_up"},
		{d.healthy, "gpuplane_device_healthy"},
		{d.monitorUp, "gpuplane_health_monitor_up"},
		{d.unmonitored, "gpuplane_health_monitor_unmonitored_devices"},
		{d.scrapeDuration, "gpuplane_scrape_duration_seconds"},
		{d.collectorDuration, "gpuplane_scrape_collector_duration_seconds"},
		{d.collectorSuccess, "gpuplane_scrape_collector_success"},
	} {
		add(o.desc, prometheus.GaugeValue, o.name, true)
	}
	return out
}
