package scheduler_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpuplane/gpuplane/api/scheduling/v1alpha1"
	"github.com/gpuplane/gpuplane/internal/adapter"
	versioncmd "github.com/gpuplane/gpuplane/internal/cli/version"
	"github.com/gpuplane/gpuplane/test/integration/framework"
)

// TestLeaderFailoverWithTwoReplicas: of two replicas one leads; when it
// stops it releases the Lease, and the other takes over within a fraction
// of the lease's duration, so a leader that left the Lease to expire fails.
// The renew deadline is long enough for a loaded 2-core machine under
// -race, where a leader that misses it stops with ErrLostLeadership.
func TestLeaderFailoverWithTwoReplicas(t *testing.T) {
	const (
		leaseDuration = 20 * time.Second
		renewDeadline = 15 * time.Second
		retryPeriod   = 500 * time.Millisecond
		// takeover bounds the fail-over: well under leaseDuration, well
		// over the standby's retry period (with its jitter).
		takeover = leaseDuration / 2
	)
	c := newCluster(t, gpuNodes(1, "failover")...)
	replica := func(id string) func() {
		return c.run(adapter.Config{LeaseName: "sched", LeaseNamespace: c.ns, Identity: id,
			LeaseDuration: leaseDuration, RenewDeadline: renewDeadline, RetryPeriod: retryPeriod})
	}
	stops := map[string]func(){"one": replica("one"), "two": replica("two")}
	holder := func(ctx context.Context) (string, error) {
		l, err := env.Client.CoordinationV1().Leases(c.ns).Get(ctx, "sched", metav1.GetOptions{})
		if err != nil {
			return "", err
		}
		if l.Spec.HolderIdentity == nil {
			return "", nil
		}
		return *l.Spec.HolderIdentity, nil
	}
	c.create(c.pod("before").GPUs(1))
	c.waitBound("", 1, 30*time.Second)
	first, err := holder(t.Context())
	if err != nil || stops[first] == nil {
		t.Fatalf("lease holder %q (err %v), want one or two", first, err)
	}
	// The leader records its build on the Lease, and keeps renewing the
	// Lease it wrote to; gpuplane version reads the build from there.
	framework.Eventually(t, 30*time.Second, "the leader's build on its Lease", func(ctx context.Context) (bool, error) {
		r := &versioncmd.Report{}
		if err := versioncmd.Collect(ctx, env.Client, r); err != nil {
			return false, err
		}
		for _, s := range r.Schedulers {
			if s.Name == c.ns+"/sched" {
				return s.Build != nil && s.Build.Version != "" && s.Holder == first, fmt.Errorf("scheduler entry %+v", s)
			}
		}
		return false, fmt.Errorf("no scheduler build among %+v", r.Schedulers)
	})
	// The leader stops (and releases the Lease); the standby takes over
	// before the Lease could have expired, and schedules what arrives next.
	stops[first]()
	framework.Eventually(t, takeover, "the other replica to lead", func(ctx context.Context) (bool, error) {
		h, err := holder(ctx)
		return err == nil && h != "" && h != first, fmt.Errorf("holder %q (err %w)", h, err)
	})
	c.create(c.pod("after").GPUs(1))
	c.waitBound("", 2, 30*time.Second)
}

func TestRestartInTheMiddleOfAGang(t *testing.T) {
	tests := []struct {
		name string
		// filler GPUs already taken on the node by another workload.
		filler   int
		wantGang int
	}{
		{name: "a partly bound gang that still fits is completed", filler: 0, wantGang: 4},
		{name: "a partly bound gang that no longer fits is torn down", filler: 6, wantGang: 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			nodes := gpuNodes(1, "restart")
			node := nodes[0].Obj().Name
			c := newCluster(t, nodes...)
			if tc.filler > 0 {
				c.createPod(framework.Pod(c.ns, "filler").GPUs(tc.filler).NodeName(node).Obj())
			}
			// What a scheduler that died mid-gang leaves: two of four
			// members bound, two still pending.
			c.podGroup("job", 4, "")
			for i := range 4 {
				b := c.pod(fmt.Sprintf("job-%d", i)).GPUs(1).Label(v1alpha1.PodGroupLabel, "job").Label("gang", "job")
				if i < 2 {
					b = b.NodeName(node)
				}
				c.create(b)
			}
			c.run(adapter.Config{})
			c.waitBound("gang=job", tc.wantGang, 30*time.Second)
			if tc.wantGang == 0 {
				framework.Eventually(t, 30*time.Second, "the torn-down pods gone", func(ctx context.Context) (bool, error) {
					ps, err := c.pods(ctx, "gang=job")
					if err != nil {
						return false, err
					}
					for _, p := range ps {
						if p.Spec.NodeName != "" {
							return false, fmt.Errorf("pod %s still on %s", p.Name, p.Spec.NodeName)
						}
					}
					return true, nil
				})
				ev, err := env.Client.CoreV1().Events(c.ns).List(t.Context(), metav1.ListOptions{FieldSelector: "reason=GangIncomplete"})
				if err != nil {
					t.Fatal(err)
				}
				if len(ev.Items) == 0 {
					t.Error("no GangIncomplete event says why the bound pods were deleted")
				}
			}
		})
	}
}

// TestRestartResumesACommittedGang starts the scheduler on what a
// predecessor leaves when it dies after committing a gang's placement and
// binding half of it: the rest is bound where the record says, on the GPUs
// it names, not re-placed.
func TestRestartResumesACommittedGang(t *testing.T) {
	nodes := gpuNodes(2, "resume")
	first, second := nodes[0].Obj().Name, nodes[1].Obj().Name
	c := newCluster(t, nodes...)
	c.podGroup("job", 4, "")
	var placement []v1alpha1.MemberPlacement
	for i := range 4 {
		name := fmt.Sprintf("job-%d", i)
		b := c.pod(name).GPUs(2).Label(v1alpha1.PodGroupLabel, "job").Label("gang", "job")
		node, gpus := first, fmt.Sprintf("%d,%d", 2*i, 2*i+1)
		if i >= 2 {
			// The unbound half goes to the second node's last GPUs; the
			// core, packing, would put it beside the bound half.
			node = second
		}
		if i < 2 {
			b = b.NodeName(node).Annotation(adapter.GPUsAnnotation, gpus)
		}
		p := b.Obj()
		c.createPod(p)
		created, err := env.Client.CoreV1().Pods(c.ns).Get(t.Context(), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		placement = append(placement, v1alpha1.MemberPlacement{Pod: name, UID: string(created.UID), Node: node, GPUs: gpus})
	}
	pg, err := c.getPodGroup(t.Context(), "job")
	if err != nil {
		t.Fatal(err)
	}
	pg.Status.Phase, pg.Status.Placement = v1alpha1.PodGroupScheduled, placement
	c.updatePodGroupStatus(pg)

	c.run(adapter.Config{})
	c.waitBound("gang=job", 4, 30*time.Second)
	ps, err := c.pods(t.Context(), "gang=job")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range placement {
		p := ps[m.Pod]
		if p.Spec.NodeName != m.Node || p.Annotations[adapter.GPUsAnnotation] != m.GPUs {
			t.Errorf("%s on %s GPUs %q, want where the record put it: %s GPUs %q", m.Pod, p.Spec.NodeName, p.Annotations[adapter.GPUsAnnotation], m.Node, m.GPUs)
		}
	}
}

// TestSchedulerBinary runs the built gpuplane-scheduler as a process, as a
// Deployment would: it must report ready, schedule, and serve metrics.
func TestSchedulerBinary(t *testing.T) {
	c := newCluster(t, gpuNodes(1, "binary")...)
	bin, err := framework.BuildCommand(t.Context(), t.TempDir(), "gpuplane-scheduler")
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin, "--kubeconfig", env.ControlPlane.Kubeconfig(), "--scheduler-name", c.scheduler,
		"--serve-address", addr, "--leader-elect-namespace", c.ns, "--leader-elect-identity", "binary", "--log-level", "warn")
	cmd.Stderr = os.Stderr
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		if err := cmd.Wait(); err != nil && ctx.Err() == nil {
			t.Errorf("gpuplane-scheduler exited: %v", err)
		}
	})
	get := func(ctx context.Context, path string) (string, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+path, nil)
		if err != nil {
			return "", err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			return "", fmt.Errorf("%s: %s", path, resp.Status)
		}
		return string(b), err
	}
	framework.Eventually(t, 60*time.Second, "/readyz", func(ctx context.Context) (bool, error) {
		_, err := get(ctx, "/readyz")
		return err == nil, err
	})
	c.create(c.pod("by-binary").GPUs(2))
	c.waitBound("", 1, 30*time.Second)
	framework.Eventually(t, 30*time.Second, "bind metrics", func(ctx context.Context) (bool, error) {
		body, err := get(ctx, "/metrics")
		if err != nil {
			return false, err
		}
		return strings.Contains(body, `gpuplane_scheduler_binds_total{result="bound"} 1`) &&
			strings.Contains(body, "gpuplane_scheduler_cycle_phase_duration_seconds_bucket") &&
			strings.Contains(body, `gpuplane_scheduler_leader 1`) &&
			strings.Contains(body, `gpuplane_build_info{`), errors.New("metrics lack the bind, the cycle phases, leadership or the build")
	})
	p, err := env.Client.CoreV1().Pods(c.ns).Get(t.Context(), "by-binary", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := p.Annotations[adapter.GPUsAnnotation]; got != "0,1" {
		t.Errorf("%s = %q, want the two GPUs the scheduler chose, 0,1", adapter.GPUsAnnotation, got)
	}
}
