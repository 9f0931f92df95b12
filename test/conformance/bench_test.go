package conformance

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// waitAllocatable polls the kubelet's view as fast as it can and returns
// how long the resource took to reach n allocatable devices.
func (k *kubelet) waitAllocatable(b *testing.B, name string, n int64, within time.Duration) time.Duration {
	b.Helper()
	start := time.Now()
	for {
		if _, a := k.counts(name); a == n {
			return time.Since(start)
		}
		if time.Since(start) > within {
			b.Fatalf("%s never reached %d allocatable within %v", name, n, within)
		}
		runtime.Gosched()
	}
}

// BenchmarkXIDToKubeletUnhealthy measures the time from an XID injected in
// the simulated driver to the kubelet's device manager counting the GPU as
// unhealthy (allocatable drops), through the health monitor, ListAndWatch
// and the kubelet's endpoint client.
func BenchmarkXIDToKubeletUnhealthy(b *testing.B) {
	if noNamespace != "" {
		b.Skip(noNamespace)
	}
	k := startKubelet(b)
	n := startAgent(b, "dgxh100", "version: v1\nhealth:\n  probation: 200ms\n", nil)
	k.waitAllocatable(b, "nvidia.com/gpu", 8, 5*time.Second)
	var lat []time.Duration
	for i := 0; b.Loop(); i++ {
		if err := n.sim.InjectXID(i%8, 48); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, k.waitAllocatable(b, "nvidia.com/gpu", 7, 5*time.Second))
		b.StopTimer()
		k.waitAllocatable(b, "nvidia.com/gpu", 8, 5*time.Second) // recovery
		b.StartTimer()
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
	b.ReportMetric(float64(lat[len(lat)-1].Microseconds()), "max-µs")
}

// BenchmarkAgentRSS runs the gpuplane-agent binary named by
// $GPUPLANE_AGENT_BIN on a simulated DGX H100 time-sliced 10 ways, lets the
// kubelet's device manager register it and allocate from it, and reports
// the agent's resident memory.
func BenchmarkAgentRSS(b *testing.B) {
	bin := os.Getenv("GPUPLANE_AGENT_BIN")
	if bin == "" {
		b.Skip("set GPUPLANE_AGENT_BIN to a built gpuplane-agent")
	}
	if noNamespace != "" {
		b.Skip(noNamespace)
	}
	k := startKubelet(b)
	dir := b.TempDir()
	cfg := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(cfg, []byte("version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 10\n"), 0o644); err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(bin, "--simulate", "dgxh100", "--config", cfg, "--kubelet-dir", pluginapi.DevicePluginPath, "--cdi-dir", filepath.Join(dir, "cdi"), "--log-level", "warn")
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() { _ = cmd.Process.Signal(os.Interrupt); _ = cmd.Wait() }()
	k.waitAllocatable(b, "nvidia.com/gpu", 80, 10*time.Second)
	for b.Loop() {
		if _, err := k.admit("nvidia.com/gpu", 1); err != nil {
			b.Fatal(err)
		}
		k.releaseAll()
	}
	rss, hwm, err := memory(cmd.Process.Pid)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(rss, "rss-MiB")
	b.ReportMetric(hwm, "peak-rss-MiB")
}

// memory reads VmRSS and VmHWM of a process, in MiB.
func memory(pid int) (rss, hwm float64, err error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) < 2 {
			continue
		}
		kb, _ := strconv.ParseFloat(fields[1], 64)
		switch fields[0] {
		case "VmRSS:":
			rss = kb / 1024
		case "VmHWM:":
			hwm = kb / 1024
		}
	}
	return rss, hwm, s.Err()
}
