package ui_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	"github.com/gpuplane/gpuplane/api/gpunode"
	"github.com/gpuplane/gpuplane/api/scheduling/v1alpha1"
	"github.com/gpuplane/gpuplane/internal/cli/dev"
	"github.com/gpuplane/gpuplane/internal/localcluster"
	"github.com/gpuplane/gpuplane/internal/testutil/build"
	"github.com/gpuplane/gpuplane/test/integration/framework"
)

// ScreenshotsEnv names a directory the test saves a screenshot of each
// view into (make docs-ui-screenshots points it at docs/images).
const ScreenshotsEnv = "GPUPLANE_UI_SCREENSHOTS"

// updateBound is how soon a change in the cluster must reach the page:
// the web view's functional requirement (docs/howto/web-ui.md).
const updateBound = 2 * time.Second

// gpuplane runs the built CLI against the dev cluster of stateDir.
func gpuplane(t *testing.T, stateDir string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(binDir, "gpuplane"), append(args, "--state-dir", stateDir)...)
	cmd.Env = append(os.Environ(), dev.LifelineEnv+"="+strconv.Itoa(os.Getpid()))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("gpuplane %v: %v\n%s", args, err, out.String())
	}
	return out.String()
}

// devCluster starts two simulated DGX H100 nodes with gpuplane-scheduler
// and stops them when the test ends.
func devCluster(t *testing.T) (stateDir, kubeconfig string, client kubernetes.Interface, dyn dynamic.Interface) {
	t.Helper()
	framework.RequireBinaries(t, localcluster.Config{BinDir: cpBinDir, ControllerManager: true, Scheduler: true})
	base, err := os.MkdirTemp("", "ui-dev-")
	if err != nil {
		t.Fatal(err)
	}
	stateDir = filepath.Join(base, "s")
	t.Cleanup(func() {
		if _, err := os.Stat(stateDir); err == nil {
			gpuplane(t, stateDir, "dev", "down")
		}
		_ = os.RemoveAll(base)
	})
	gpuplane(t, stateDir, "dev", "up", "--nodes", "2", "--profile", "dgxh100", "--bin-dir", cpBinDir, "--agent-binary", filepath.Join(binDir, "gpuplane-agent"))
	kubeconfig = filepath.Join(stateDir, "kubeconfig")
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	if client, err = kubernetes.NewForConfig(cfg); err != nil {
		t.Fatal(err)
	}
	if dyn, err = dynamic.NewForConfig(cfg); err != nil {
		t.Fatal(err)
	}
	return stateDir, kubeconfig, client, dyn
}

func createUnstructured(t *testing.T, dyn dynamic.Interface, ns string, obj runtime.Object, gvrName string) {
	t.Helper()
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{Object: m}
	u.SetAPIVersion(v1alpha1.SchemeGroupVersion.String())
	var r dynamic.ResourceInterface
	switch gvrName {
	case "queue":
		u.SetKind("Queue")
		r = dyn.Resource(v1alpha1.QueuesResource)
	default:
		u.SetKind("PodGroup")
		r = dyn.Resource(v1alpha1.PodGroupsResource).Namespace(ns)
	}
	if _, err := r.Create(t.Context(), u, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating %s %s: %v", u.GetKind(), u.GetName(), err)
	}
}

func gpuPod(name string, gpus int) *corev1.Pod {
	return framework.Pod("default", name).GPUs(gpus).SchedulerName(v1alpha1.SchedulerName).Label(v1alpha1.QueueLabel, "team-a").Obj()
}

// boundAt watches pod name and returns a channel that gets the time the
// watch first saw it bound to a node.
func boundAt(t *testing.T, client kubernetes.Interface, name string) <-chan time.Time {
	t.Helper()
	w, err := client.CoreV1().Pods("default").Watch(t.Context(), metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", name).String()})
	if err != nil {
		t.Fatal(err)
	}
	ch := make(chan time.Time, 1)
	go func() {
		defer w.Stop()
		for ev := range w.ResultChan() {
			if p, ok := ev.Object.(*corev1.Pod); ok && p.Spec.NodeName != "" {
				ch <- time.Now()
				return
			}
		}
	}()
	return ch
}

// quarantinedAt watches node and returns a channel that gets the time the
// watch first saw GPU gpu in its quarantine record, not returned.
func quarantinedAt(t *testing.T, client kubernetes.Interface, node string, gpu int) <-chan time.Time {
	t.Helper()
	w, err := client.CoreV1().Nodes().Watch(t.Context(), metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", node).String()})
	if err != nil {
		t.Fatal(err)
	}
	ch := make(chan time.Time, 1)
	go func() {
		defer w.Stop()
		for ev := range w.ResultChan() {
			n, ok := ev.Object.(*corev1.Node)
			if !ok {
				continue
			}
			r, err := gpunode.ParseQuarantine(n.Annotations[gpunode.QuarantineAnnotation])
			if err != nil {
				continue
			}
			for _, g := range r.GPUs {
				if g.Index == gpu && g.State != gpunode.QuarantineReturned {
					ch <- time.Now()
					return
				}
			}
		}
	}()
	return ch
}

// JS expressions the test waits on.
const (
	jsDrawn = `window.gpuplaneUI.seq > 0`
	// jsGPUHeldBy is true once a GPU cell of the map names pod %s.
	jsGPUHeldBy = `[...document.querySelectorAll('#map .gpu')].some(e => (e.getAttribute('aria-label') || '').includes(%q))`
	// jsGPUOut is true once GPU %d of node %s is drawn out of service.
	jsGPUOut = `[...document.querySelectorAll('#map .row[data-node=%q] .gpu.out')].some(e => e.getAttribute('aria-label').startsWith('GPU %d quarantined'))`
)

func TestWebUI(t *testing.T) {
	b := newBrowser(t)
	stateDir, kubeconfig, client, dyn := devCluster(t)
	shots := os.Getenv(ScreenshotsEnv)

	createUnstructured(t, dyn, "", build.Queue("team-a").GPUs("8", "").Obj(), "queue")
	createUnstructured(t, dyn, "", build.Queue("team-b").GPUs("4", "").Obj(), "queue")
	holder := gpuPod("holder", 4)
	holder.Spec.ActiveDeadlineSeconds = ptr.To(int64(3600))
	if _, err := client.CoreV1().Pods("default").Create(t.Context(), holder, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, time.Minute, "pod holder bound", func(ctx context.Context) (bool, error) {
		p, err := client.CoreV1().Pods("default").Get(ctx, "holder", metav1.GetOptions{})
		return err == nil && p.Spec.NodeName != "", err
	})
	// A gang of two pods of 8 GPUs: with holder on 4 GPUs of one of the
	// two nodes, it waits until holder ends.
	createUnstructured(t, dyn, "default", build.PodGroup("default", "wide", 2).Queue("team-a").Obj(), "podgroup")
	for i := range 2 {
		p := gpuPod(fmt.Sprintf("wide-%d", i), 8)
		p.Labels[v1alpha1.PodGroupLabel] = "wide"
		if _, err := client.CoreV1().Pods("default").Create(t.Context(), p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	addr := uiProcess(t, "--kubeconfig", kubeconfig, "--gpu-hour-price", "2.5")
	b.run(t, chromedp.Navigate(addr))
	b.waitJS(t, 30*time.Second, "the first state drawn", jsDrawn)

	t.Run("the map shows the nodes and who holds each GPU", func(t *testing.T) {
		b.waitJS(t, 30*time.Second, "both nodes on the map", `document.querySelectorAll('#map .row').length === 2`)
		b.waitJS(t, 30*time.Second, "holder on the map", fmt.Sprintf(jsGPUHeldBy, "default/holder (whole)"))
		// The keyboard: focus the list, move to the node holding the pod
		// and open it.
		node := eval[string](t, b, `document.querySelector('#map .gpu.whole').closest('.row').dataset.node`)
		b.run(t, chromedp.Focus(chromedp.CSS("#map")))
		if node == "gpu-node-2" {
			b.run(t, chromedp.KeyEvent(kb.ArrowDown))
		}
		b.run(t, chromedp.KeyEvent(kb.Enter))
		b.waitJS(t, 10*time.Second, "the node's detail", fmt.Sprintf(`document.querySelector('#node-detail h3')?.textContent === %q`, node))
		detail := b.text(t, "#node-detail")
		for _, want := range []string{"held by default/holder — whole, queue team-a", "Product", "NVIDIA-H100-80GB-HBM3", "NVLink", "GPUs 0-7", "4 whole"} {
			if !strings.Contains(detail, want) {
				t.Errorf("node detail lacks %q:\n%s", want, detail)
			}
		}
		if strings.Contains(detail, "not ready") || !regexp.MustCompile(`Ready\s+yes`).MatchString(detail) {
			t.Errorf("node detail says the node is unhealthy:\n%s", detail)
		}
		if n := strings.Count(detail, "held by default/holder"); n != 4 {
			t.Errorf("node detail names holder on %d GPUs, want 4:\n%s", n, detail)
		}
		if errs := b.consoleErrors(); len(errs) > 0 {
			t.Errorf("console errors on the map: %v", errs)
		}
	})

	t.Run("the queues view shows the tree with usage and guarantee", func(t *testing.T) {
		b.run(t, chromedp.KeyEvent("2"))
		b.waitJS(t, 10*time.Second, "the queues", `!document.getElementById('view-queues').hidden && document.querySelector('#queues tbody').innerText.includes('team-b')`)
		// Usage is what gpuplane-scheduler writes in the Queue's status
		// after its next cycle.
		b.waitJS(t, 60*time.Second, "team-a using 4 of its 8 guaranteed GPUs, with a fair share", `[...document.querySelectorAll('#queues tbody tr')].some(r => {
			const c = [...r.cells].map(x => x.innerText);
			return c[0] === 'team-a' && c[1] === '4' && c[2] !== '0' && c[3] === '8';
		})`)
		b.screenshot(t, shots, "ui-queues")
		if errs := b.consoleErrors(); len(errs) > 0 {
			t.Errorf("console errors on the queues view: %v", errs)
		}
	})

	t.Run("a pending gang shows the scheduler's reason and the core's what-if", func(t *testing.T) {
		b.run(t, chromedp.KeyEvent("3"))
		b.waitJS(t, 60*time.Second, "gang wide waiting with the scheduler's reason",
			`[...document.querySelectorAll('#waiting tbody tr')].some(r => r.dataset.group === 'pg/default/wide' && !r.innerText.includes('no reason recorded'))`)
		row := eval[string](t, b, `[...document.querySelectorAll('#waiting tbody tr')].find(r => r.dataset.group === 'pg/default/wide').innerText`)
		if !strings.Contains(row, "team-a") || !strings.Contains(row, "0 / 2") {
			t.Errorf("waiting row %q: want queue team-a, 0 of 2 placed", row)
		}
		b.clickUntil(t, 60*time.Second, `#waiting tbody tr[data-group="pg/default/wide"]`, "the what-if",
			`document.getElementById('whatif').dataset.verdict !== undefined`)
		whatIf := b.text(t, "#whatif")
		for _, want := range []string{"fits when job pod/default/holder ends (in about 60 min", "run(s) of the scheduling core"} {
			if !strings.Contains(whatIf, want) {
				t.Errorf("what-if lacks %q:\n%s", want, whatIf)
			}
		}
		running := b.text(t, "#running tbody")
		if !strings.Contains(running, "pod/default/holder\tteam-a\t1\t4\t") {
			t.Errorf("running workloads:\n%s\nwant holder with 4 GPUs", running)
		}
		b.screenshot(t, shots, "ui-workloads")
		if errs := b.consoleErrors(); len(errs) > 0 {
			t.Errorf("console errors on the workloads view: %v", errs)
		}
	})

	t.Run("the cost view shows GPU time by namespace and queue", func(t *testing.T) {
		b.run(t, chromedp.KeyEvent("4"))
		b.waitJS(t, 10*time.Second, "cost rows", `document.querySelector('#cost-ns tbody').innerText.includes('default') && document.querySelector('#cost-queue tbody').innerText.includes('team-a')`)
		b.screenshot(t, shots, "ui-cost")
		if errs := b.consoleErrors(); len(errs) > 0 {
			t.Errorf("console errors on the cost view: %v", errs)
		}
	})

	t.Run("a pod bound appears within the bound", func(t *testing.T) {
		b.run(t, chromedp.KeyEvent("1"))
		bound := boundAt(t, client, "late")
		if _, err := client.CoreV1().Pods("default").Create(t.Context(), gpuPod("late", 2), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		var at time.Time
		select {
		case at = <-bound:
		case <-time.After(time.Minute):
			t.Fatal("pod late was not bound in a minute")
		}
		seen := b.waitJS(t, 30*time.Second, "pod late on the map", fmt.Sprintf(jsGPUHeldBy, "default/late"))
		lat := seen.Sub(at)
		t.Logf("bind to page: %v", lat.Round(time.Millisecond))
		if lat > updateBound {
			t.Errorf("the page showed the bind %v after it happened, want within %v", lat, updateBound)
		}
	})

	t.Run("a GPU quarantined by dev fault appears within the bound", func(t *testing.T) {
		// Resets of the node's GPUs fail from now on, so that the GPU stays
		// quarantined (held) rather than returning after its reset.
		gpuplane(t, stateDir, "dev", "fault", "gpu-node-2", "--gpu", "7", "--fail-reset")
		quarantined := quarantinedAt(t, client, "gpu-node-2", 7)
		start := time.Now()
		gpuplane(t, stateDir, "dev", "fault", "gpu-node-2", "--gpu", "7", "--xid", "48")
		var at time.Time
		select {
		case at = <-quarantined:
		case <-time.After(time.Minute):
			t.Fatal("GPU 7 of gpu-node-2 was not quarantined in a minute")
		}
		seen := b.waitJS(t, 30*time.Second, "GPU 7 out of service on the map", fmt.Sprintf(jsGPUOut, "gpu-node-2", 7))
		lat := seen.Sub(at)
		t.Logf("quarantine recorded on the node to page: %v (fault injected to page: %v)", lat.Round(time.Millisecond), seen.Sub(start).Round(time.Millisecond))
		if lat > updateBound {
			t.Errorf("the page showed the quarantine %v after the node recorded it, want within %v", lat, updateBound)
		}
		b.clickUntil(t, 10*time.Second, `#map .row[data-node="gpu-node-2"]`, "gpu-node-2's detail with GPU 7 out of service",
			`document.querySelector('#node-detail h3')?.textContent === 'gpu-node-2' && document.getElementById('node-detail').innerText.includes('GPU 7: QUARANTINED')`)
		b.screenshot(t, shots, "ui-gpu-map")
		if errs := b.consoleErrors(); len(errs) > 0 {
			t.Errorf("console errors: %v", errs)
		}
	})
}
