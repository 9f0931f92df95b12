package schedulerscale_test

// What BenchmarkSchedulerPerf measures beside pods/s: the CPU of each
// process, the API server's requests, gpuplane-scheduler's profile and
// metrics, and the bind-only ceiling.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/gpuplane/gpuplane/internal/adapter"
	"github.com/gpuplane/gpuplane/test/integration/framework"
)

// perfComponents are the control plane's processes whose CPU time a round
// reports.
var perfComponents = []string{"kube-apiserver", "etcd", "kwok"}

// procCPUSeconds is the user and system CPU time process pid has taken,
// from /proc/<pid>/stat (in USER_HZ ticks, 100 a second on Linux).
func procCPUSeconds(pid int) (float64, error) {
	if pid == 0 {
		return 0, errors.New("no process")
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("reading the stat of process %d: %w", pid, err)
	}
	// The command name, field 2, is in parentheses and may hold spaces:
	// fields are counted after its closing one (utime and stime are 14
	// and 15, the 12th and 13th after it).
	_, rest, ok := strings.Cut(string(b), ") ")
	fields := strings.Fields(rest)
	if !ok || len(fields) < 13 {
		return 0, fmt.Errorf("process %d: malformed /proc/%d/stat", pid, pid)
	}
	var ticks float64
	for _, f := range fields[11:13] {
		v, err := strconv.ParseUint(f, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("process %d: parsing CPU time %q: %w", pid, f, err)
		}
		ticks += float64(v)
	}
	return ticks / 100, nil
}

// startBindOnly binds the init and measured pods of ns that are waiting,
// round robin over the workload's nodes from h.next (over every stride-th
// node, those of the first zone, when stride > 1), with 256 workers and
// the schedulers' client budget, and returns a function that waits until
// it has finished. It decides nothing: it is the API server's ceiling.
func (h *perfHarness) startBindOnly(tb testing.TB, ns string, stride int) func() {
	cfg := rest.CopyConfig(env.Config)
	cfg.QPS, cfg.Burst = qps, burst
	cfg.ContentType = "application/vnd.kubernetes.protobuf"
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	list, err := client.CoreV1().Pods(ns).List(tb.Context(), metav1.ListOptions{LabelSelector: perfRoleLabel + "!=" + string(roleChurn)})
	if err != nil {
		tb.Fatal(err)
	}
	type bind struct {
		pod  *corev1.Pod
		node string
	}
	work := make(chan bind)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	for range 256 {
		wg.Go(func() {
			for w := range work {
				b := &corev1.Binding{
					ObjectMeta: metav1.ObjectMeta{Namespace: w.pod.Namespace, Name: w.pod.Name, UID: w.pod.UID},
					Target:     corev1.ObjectReference{Kind: "Node", Name: w.node},
				}
				if err := client.CoreV1().Pods(ns).Bind(context.Background(), b, metav1.CreateOptions{}); err != nil {
					mu.Lock()
					errs = append(errs, fmt.Errorf("binding %s/%s: %w", ns, w.pod.Name, err))
					mu.Unlock()
				}
			}
		})
	}
	var todo []bind
	for i := range list.Items {
		if p := &list.Items[i]; p.Spec.NodeName == "" {
			n := (h.nodes + stride - 1) / stride
			todo = append(todo, bind{pod: p, node: fmt.Sprintf("%s-%05d", h.bench, h.next%n*stride)})
			h.next++
		}
	}
	go func() {
		for _, b := range todo {
			work <- b
		}
		close(work)
	}()
	return func() {
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			tb.Error(err)
		}
	}
}

// startBareBinder binds the init and measured pods of ns that are waiting,
// to the nodes startBindOnly would pick, through gpuplane-scheduler's own
// bind pipeline (adapter.BareBinder: its clients, bind connections,
// requests in flight per connection and bind workers, with the client
// budget the benchmark gives gpuplane-scheduler). It lists the pods over
// the shared connection while the bind connections open, as
// gpuplane-scheduler reads the cluster, then binds them all; it returns a
// function that waits until every bind was answered. It decides nothing:
// the distance from gpuplane-scheduler to it is the scheduler's own time.
func (h *perfHarness) startBareBinder(tb testing.TB, ns string, stride int) func() {
	ctx, cancel := context.WithCancel(context.Background())
	b, err := adapter.NewBareBinder(ctx, adapter.Config{RESTConfig: env.Config, QPS: qps, Burst: burst})
	if err != nil {
		cancel()
		tb.Fatal(err)
	}
	list, err := b.Client().CoreV1().Pods(ns).List(tb.Context(), metav1.ListOptions{LabelSelector: perfRoleLabel + "!=" + string(roleChurn)})
	if err != nil {
		cancel()
		tb.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	n := (h.nodes + stride - 1) / stride
	for i := range list.Items {
		p := &list.Items[i]
		if p.Spec.NodeName != "" {
			continue
		}
		node := fmt.Sprintf("%s-%05d", h.bench, h.next%n*stride)
		h.next++
		wg.Add(1)
		b.Bind(ctx, p, node, func(err error) {
			defer wg.Done()
			if err != nil {
				mu.Lock()
				errs = append(errs, fmt.Errorf("binding %s/%s: %w", ns, p.Name, err))
				mu.Unlock()
			}
		})
	}
	return func() {
		wg.Wait()
		cancel()
		b.Wait()
		if err := errors.Join(errs...); err != nil {
			tb.Error(err)
		}
	}
}

// apiRequests reads kube-apiserver's apiserver_request_total from its
// /metrics, summed by verb and resource ("POST pods/binding").
func apiRequests(ctx context.Context) (map[string]float64, error) {
	client, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		return nil, err
	}
	raw, err := client.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading the API server's metrics: %w", err)
	}
	out := map[string]float64{}
	for line := range strings.SplitSeq(string(raw), "\n") {
		rest, ok := strings.CutPrefix(line, "apiserver_request_total{")
		if !ok {
			continue
		}
		labels, value, ok := strings.Cut(rest, "} ")
		if !ok {
			return nil, fmt.Errorf("the API server's metrics: malformed line %q", line)
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
		if err != nil {
			return nil, fmt.Errorf("the API server's metrics: line %q: %w", line, err)
		}
		l := map[string]string{}
		for pair := range strings.SplitSeq(labels, "\",") {
			k, val, _ := strings.Cut(pair, "=\"")
			l[k] = strings.TrimSuffix(val, "\"")
		}
		key := l["verb"] + " " + l["resource"]
		if l["subresource"] != "" {
			key += "/" + l["subresource"]
		}
		out[key] += v
	}
	if len(out) == 0 {
		return nil, errors.New("the API server's metrics have no apiserver_request_total")
	}
	return out, nil
}

// saveCPUProfile writes the CPU profile of gpuplane-scheduler (serving
// /debug/pprof/ at profileAddr) over its next perfProfileSeconds to path.
// The scheduler has just been started: the first requests wait for it.
func saveCPUProfile(tb testing.TB, path string) {
	url := fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", profileAddr, perfProfileSeconds)
	var body []byte
	err := framework.Poll(tb.Context(), 30*time.Second, "gpuplane-scheduler's CPU profile", func(ctx context.Context) (bool, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return false, err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false, err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return false, fmt.Errorf("%s: %s", url, resp.Status)
		}
		body, err = io.ReadAll(resp.Body)
		return err == nil, err
	})
	if err == nil {
		err = os.WriteFile(path, body, 0o600)
	}
	if err != nil {
		tb.Errorf("saving the CPU profile: %v", err)
		return
	}
	tb.Logf("CPU profile of gpuplane-scheduler in %s", path)
}

// saveMetrics writes gpuplane-scheduler's /metrics (served at profileAddr)
// to path.
func saveMetrics(tb testing.TB, path string) {
	ctx, cancel := context.WithTimeout(tb.Context(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+profileAddr+"/metrics", nil)
	if err != nil {
		tb.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.Errorf("reading gpuplane-scheduler's metrics: %v", err)
		return
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err == nil {
		err = os.WriteFile(path, body, 0o600)
	}
	if err != nil {
		tb.Errorf("saving gpuplane-scheduler's metrics: %v", err)
	}
}
