// Package custommetrics_test runs gpuplane's custom metrics API behind a
// real kube-apiserver's aggregation layer, fed by the agent's real
// exporter over a simulated node, and has kube-controller-manager's real
// HPA controller scale a Deployment on the GPU utilisation it serves.
package custommetrics_test

import (
	"context"
	"crypto/tls"
	"encoding/base64"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/dynamic"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	helmchart "github.com/gpuplane/gpuplane/deploy/helm"
	"github.com/gpuplane/gpuplane/internal/custommetrics"
	"github.com/gpuplane/gpuplane/internal/localcluster"
	"github.com/gpuplane/gpuplane/internal/metrics"
	"github.com/gpuplane/gpuplane/internal/metrics/metricstest"
	"github.com/gpuplane/gpuplane/test/integration/framework"
)

var env *framework.Env

func TestMain(m *testing.M) { os.Exit(framework.Main(m, localcluster.DefaultConfig(), &env)) }

// hostIP is an address of this machine that an EndpointSlice may hold:
// kube-apiserver refuses loopback ones, and routes an APIService to its
// Service's endpoints.
func hostIP(t testing.TB) string {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLoopback() && !n.IP.IsLinkLocalUnicast() {
			return n.IP.String()
		}
	}
	t.Fatal("this machine has no IPv4 address other than loopback: an APIService's endpoints cannot be loopback")
	return ""
}

// lister is the node's PodResources answer, changed as pods are added.
type lister struct {
	mu   sync.Mutex
	resp *podresourcesv1.ListPodResourcesResponse
}

func (l *lister) set(resp *podresourcesv1.ListPodResourcesResponse) {
	l.mu.Lock()
	l.resp = resp
	l.mu.Unlock()
}

func (l *lister) List(context.Context) (*podresourcesv1.ListPodResourcesResponse, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.resp == nil {
		return &podresourcesv1.ListPodResourcesResponse{}, nil
	}
	return l.resp, nil
}

// endpoints makes a Service without selector in namespace ns whose one
// endpoint is addr (host:port), on port name.
func endpoints(t testing.TB, ns, name, port, addr string) {
	t.Helper()
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	num, _ := strconv.Atoi(p)
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: corev1.ServiceSpec{
		Ports: []corev1.ServicePort{{Name: port, Port: 443, TargetPort: intstr.FromInt32(int32(num))}}}}
	if _, err := env.Client.CoreV1().Services(ns).Create(t.Context(), svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	sl := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{
			discoveryv1.LabelServiceName: name, discoveryv1.LabelManagedBy: "gpuplane-test"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{host}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To(port), Port: ptr.To(int32(num))}},
	}
	if _, err := env.Client.DiscoveryV1().EndpointSlices(ns).Create(t.Context(), sl, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// serviceEndpoint gives the Service name in namespace ns its one endpoint,
// addr (host:port), on its port named port: what the endpoint controller
// does for a Service's ready pod.
func serviceEndpoint(t testing.TB, ns, name, port, addr string) {
	t.Helper()
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	num, _ := strconv.Atoi(p)
	sl := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name + "-test", Labels: map[string]string{
			discoveryv1.LabelServiceName: name, discoveryv1.LabelManagedBy: "gpuplane-test"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{host}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To(port), Port: ptr.To(int32(num))}},
	}
	if _, err := env.Client.DiscoveryV1().EndpointSlices(ns).Create(t.Context(), sl, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// chartObjects are the objects of one rendered chart template.
type chartObjects []*unstructured.Unstructured

// object is the one object of kind.
func (c chartObjects) object(t testing.TB, kind string) *unstructured.Unstructured {
	t.Helper()
	var out *unstructured.Unstructured
	for _, u := range c {
		if u.GetKind() == kind {
			if out != nil {
				t.Fatalf("the chart's metrics API has two %ss", kind)
			}
			out = u
		}
	}
	if out == nil {
		t.Fatalf("the chart's metrics API has no %s", kind)
	}
	return out
}

// renderMetricsAPI renders the chart's metrics API (metricsAPI.enabled)
// for a release in namespace ns.
func renderMetricsAPI(t testing.TB, ns string) chartObjects {
	t.Helper()
	c, err := helmchart.Load()
	if err != nil {
		t.Fatal(err)
	}
	r, err := helmchart.Render(c, map[string]any{"metricsAPI": map[string]any{"enabled": true}}, "gpuplane", ns)
	if err != nil {
		t.Fatal(err)
	}
	var out chartObjects
	for doc := range strings.SplitSeq(r["metricsapi/metricsapi.yaml"], "\n---\n") {
		var obj map[string]any
		if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
			t.Fatal(err)
		}
		if len(obj) > 0 {
			out = append(out, &unstructured.Unstructured{Object: obj})
		}
	}
	return out
}

func nestedString(u *unstructured.Unstructured, path ...string) string {
	s, _, _ := unstructured.NestedString(u.Object, path...)
	return s
}

func listen(t testing.TB, ip string) net.Listener {
	t.Helper()
	ln, err := (&net.ListenConfig{}).Listen(t.Context(), "tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

var apiServices = schema.GroupVersionResource{Group: "apiregistration.k8s.io", Version: "v1", Resource: "apiservices"}

// rig is one simulated GPU node with the agent's real exporter, the
// custom metrics API behind the aggregation layer, and a namespace for
// Deployments whose pods run on that node.
type rig struct {
	ns   string
	node *metricstest.Node
	pr   *lister
	pid  uint32
}

// newRig starts the node's agent, the scraper and the server, and
// registers the APIService; everything goes when tb ends.
func newRig(tb testing.TB) *rig {
	tb.Helper()
	ctx := tb.Context()
	ip := hostIP(tb)
	r := &rig{ns: env.CreateNamespace(tb), pid: 4000}
	node := fmt.Sprint("gpu-", r.ns)
	if err := env.CreateNodes(ctx, []*corev1.Node{framework.GPUNode(node).GPUs(8).Label("rig", r.ns).Obj()}, 1); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = env.DeleteNodes(context.Background(), "rig="+r.ns) })
	env.WaitNodesReady(tb, "rig="+r.ns, 1, 60*time.Second)
	env.WaitNodesUntainted(tb, "rig="+r.ns, 60*time.Second)

	// The node's agent: its real exporter over a simulated DGX H100.
	r.node = metricstest.NewNode(tb, "dgxh100", node)
	r.pr = &lister{}
	exp, err := metrics.NewExporter(metrics.Options{GPUs: r.node.Backend, PodResources: r.pr, ProcRoot: r.node.ProcRoot,
		CheckpointPath: r.node.CheckpointPath, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		tb.Fatal(err)
	}
	h, err := metrics.NewHandler(exp)
	if err != nil {
		tb.Fatal(err)
	}
	agentLn := listen(tb, ip)
	agentSrv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = agentSrv.Serve(agentLn) }()
	tb.Cleanup(func() { _ = agentSrv.Close() })
	endpoints(tb, r.ns, "gpuplane-agent-metrics", "metrics", agentLn.Addr().String())

	// The custom metrics API: the scraper reads the agents the Service
	// lists; the server answers behind the aggregation layer.
	store := custommetrics.NewStore()
	sc, err := custommetrics.NewScraper(custommetrics.ScraperConfig{Client: env.Client, Store: store, Namespace: r.ns,
		Service: "gpuplane-agent-metrics", Port: "metrics", Scheme: "http", Interval: time.Second})
	if err != nil {
		tb.Fatal(err)
	}
	sctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); sc.Run(sctx) }()
	tb.Cleanup(func() { cancel(); <-done })
	srv, err := custommetrics.NewServer(custommetrics.ServerConfig{Client: env.Client, Store: store, MaxAge: 5 * time.Second, Window: time.Second})
	if err != nil {
		tb.Fatal(err)
	}
	// The chart's own wiring, as `helm install --set metricsAPI.enabled=true`
	// renders it into the rig's namespace: its serving Secret (certificate
	// and CA generated by the chart), its Service and its APIService with
	// the CA as caBundle. The server runs here, not as the chart's
	// Deployment's pod (kwok runs no container), so the Service's one
	// endpoint, which the endpoint controller would take from that pod,
	// is this process.
	chart := renderMetricsAPI(tb, r.ns)
	secret := chart.object(tb, "Secret")
	crt, _ := base64.StdEncoding.DecodeString(nestedString(secret, "data", "tls.crt"))
	key, _ := base64.StdEncoding.DecodeString(nestedString(secret, "data", "tls.key"))
	cert, err := tls.X509KeyPair(crt, key)
	if err != nil {
		tb.Fatalf("the chart's serving Secret %s: %v", secret.GetName(), err)
	}
	apiLn := tls.NewListener(listen(tb, ip), &tls.Config{Certificates: []tls.Certificate{cert}, ClientAuth: tls.RequestClientCert, MinVersion: tls.VersionTLS12})
	apiSrv := &http.Server{Handler: srv, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = apiSrv.Serve(apiLn) }()
	tb.Cleanup(func() { _ = apiSrv.Close() })

	dyn, err := dynamic.NewForConfig(env.Config)
	if err != nil {
		tb.Fatal(err)
	}
	svc := chart.object(tb, "Service")
	if _, err := dyn.Resource(corev1.SchemeGroupVersion.WithResource("services")).Namespace(r.ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		tb.Fatalf("creating the chart's Service: %v", err)
	}
	ports, _, _ := unstructured.NestedSlice(svc.Object, "spec", "ports")
	if len(ports) != 1 {
		tb.Fatalf("the chart's Service has %d ports, want 1", len(ports))
	}
	portName, _, _ := unstructured.NestedString(ports[0].(map[string]any), "name")
	serviceEndpoint(tb, r.ns, svc.GetName(), portName, apiLn.Addr().String())
	apiSvc := chart.object(tb, "APIService")
	if g, v := nestedString(apiSvc, "spec", "group"), nestedString(apiSvc, "spec", "version"); g != custommetrics.Group || v != custommetrics.Version {
		tb.Fatalf("the chart's APIService is for %s/%s, the server serves %s/%s", g, v, custommetrics.Group, custommetrics.Version)
	}
	if _, err := dyn.Resource(apiServices).Create(ctx, apiSvc, metav1.CreateOptions{}); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		_ = dyn.Resource(apiServices).Delete(context.Background(), apiSvc.GetName(), metav1.DeleteOptions{})
	})
	return r
}

// deployment creates a Deployment of one replica on the rig's node and,
// once its pod runs, gives the pod a process on its own GPU at util
// percent; it returns the process's PID.
func (r *rig) deployment(tb testing.TB, name string, util uint32) uint32 {
	tb.Helper()
	ctx := tb.Context()
	labels := map[string]string{"app": name}
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: r.ns, Name: name}, Spec: appsv1.DeploymentSpec{
		Replicas: ptr.To(int32(1)), Selector: &metav1.LabelSelector{MatchLabels: labels},
		Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{
			NodeName:   "gpu-" + r.ns,
			Containers: []corev1.Container{{Name: "main", Image: "inference-server"}},
		}},
	}}
	if _, err := env.Client.AppsV1().Deployments(r.ns).Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		tb.Fatal(err)
	}
	var pod string
	framework.Eventually(tb, 60*time.Second, "the first replica of "+name+" running", func(ctx context.Context) (bool, error) {
		pods, err := env.Client.CoreV1().Pods(r.ns).List(ctx, metav1.ListOptions{LabelSelector: "app=" + name})
		if err != nil || len(pods.Items) != 1 {
			return false, err
		}
		pod = pods.Items[0].Name
		return pods.Items[0].Status.Phase == corev1.PodRunning, nil
	})
	gpu := int(r.pid-4000) % 8
	r.pid++
	r.node.AddPod(tb, metricstest.Pod{Namespace: r.ns, Name: pod, Container: "main", Resource: "nvidia.com/gpu",
		DeviceID: r.node.Devices(tb)[gpu].UUID, GPU: gpu, PID: r.pid, MemMiB: 20000, Util: util})
	r.node.WriteCheckpoint(tb)
	r.node.Clock.Advance(time.Minute)
	r.pr.set(r.node.Response())
	return r.pid
}

// load sets the GPU utilisation the process drives.
func (r *rig) load(tb testing.TB, pid, util uint32) {
	tb.Helper()
	if err := r.node.Backend.SetProcessLoad(pid, util, util); err != nil {
		tb.Fatal(err)
	}
	r.node.Clock.Advance(time.Minute)
}

// docsHPA is the HorizontalPodAutoscaler of the how-to page, as users
// copy it.
func docsHPA(tb testing.TB) *autoscalingv2.HorizontalPodAutoscaler {
	tb.Helper()
	_, file, _, _ := runtime.Caller(0)
	page := filepath.Join(filepath.Dir(file), "..", "..", "..", "docs", "howto", "autoscale-on-gpu.md")
	b, err := os.ReadFile(page)
	if err != nil {
		tb.Fatal(err)
	}
	for _, block := range strings.Split(string(b), "```yaml\n")[1:] {
		text, _, _ := strings.Cut(block, "```")
		text = dedent(text)
		var hpa autoscalingv2.HorizontalPodAutoscaler
		if err := yaml.UnmarshalStrict([]byte(text), &hpa); err == nil && hpa.Kind == "HorizontalPodAutoscaler" {
			return &hpa
		}
	}
	tb.Fatalf("%s shows no HorizontalPodAutoscaler", page)
	return nil
}

// dedent removes the indentation of a block's first line from all.
func dedent(s string) string {
	lines := strings.Split(s, "\n")
	indent := len(lines[0]) - len(strings.TrimLeft(lines[0], " "))
	for i, l := range lines {
		if len(l) >= indent && strings.TrimSpace(l[:indent]) == "" {
			lines[i] = l[indent:]
		}
	}
	return strings.Join(lines, "\n")
}

// hpa creates the docs' HPA for the Deployment name in the rig's
// namespace and waits until it reads the pods' utilisation as want.
func (r *rig) hpa(tb testing.TB, name string, want int64) {
	tb.Helper()
	h := docsHPA(tb)
	h.Namespace, h.Name, h.Spec.ScaleTargetRef.Name = r.ns, name, name
	if _, err := env.Client.AutoscalingV2().HorizontalPodAutoscalers(r.ns).Create(tb.Context(), h, metav1.CreateOptions{}); err != nil {
		tb.Fatal(err)
	}
	framework.Eventually(tb, 90*time.Second, fmt.Sprintf("the HPA of %s reading %d", name, want), func(ctx context.Context) (bool, error) {
		got, err := env.Client.AutoscalingV2().HorizontalPodAutoscalers(r.ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, m := range got.Status.CurrentMetrics {
			if m.Pods != nil && m.Pods.Current.AverageValue != nil && m.Pods.Current.AverageValue.Value() == want {
				return got.Status.DesiredReplicas == 1, fmt.Errorf("desired %d", got.Status.DesiredReplicas)
			}
		}
		return false, fmt.Errorf("current metrics %+v, conditions %+v", got.Status.CurrentMetrics, got.Status.Conditions)
	})
}

// replicas waits until the Deployment asks for n replicas.
func replicas(tb testing.TB, ns, name string, n int32, timeout time.Duration) {
	tb.Helper()
	framework.Eventually(tb, timeout, fmt.Sprintf("%s scaled to %d", name, n), func(ctx context.Context) (bool, error) {
		d, err := env.Client.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return *d.Spec.Replicas == n, fmt.Errorf("%d replicas", *d.Spec.Replicas)
	})
}

// The HorizontalPodAutoscaler of docs/howto/autoscale-on-gpu.md, read
// through the aggregated custom metrics API, scales an inference
// Deployment when its pod's GPU load rises: the agent's exporter measures
// the load of the pod's process on a simulated H100, the scraper reads the
// exporter, the server answers kube-apiserver, and kube-controller-manager's
// HPA controller decides.
func TestHPAScalesOnGPUUtilization(t *testing.T) {
	r := newRig(t)
	name := docsHPA(t).Spec.ScaleTargetRef.Name
	pid := r.deployment(t, name, 20)

	// Through kube-apiserver, as the HPA controller reads it.
	path := fmt.Sprintf("/apis/%s/%s/namespaces/%s/pods/*/%s", custommetrics.Group, custommetrics.Version, r.ns, custommetrics.MetricGPUUtil)
	framework.Eventually(t, 60*time.Second, "the pod's GPU utilisation through kube-apiserver", func(ctx context.Context) (bool, error) {
		body, err := env.Client.CoreV1().RESTClient().Get().AbsPath(path).Param("labelSelector", "app="+name).DoRaw(ctx)
		if err != nil {
			return false, fmt.Errorf("%w: %s", err, body)
		}
		return strings.Contains(string(body), `"value":"20"`), fmt.Errorf("answer %s", body)
	})
	// At 20% the HPA reads the metric and keeps one replica.
	r.hpa(t, name, 20)
	// The load rises to 90%: two replicas (90 / 50, rounded up).
	r.load(t, pid, 90)
	replicas(t, r.ns, name, 2, 90*time.Second)
}

// BenchmarkHPAReactsToGPULoad measures the seconds from a pod's GPU load
// rising (20% to 90%) to kube-controller-manager's HPA controller asking
// for the new replica count, through the agent's exporter, the scraper
// (every second) and the aggregated API; one fresh Deployment and HPA per
// iteration. The HPA controller's sync period (15 s by default) dominates.
func BenchmarkHPAReactsToGPULoad(b *testing.B) {
	r := newRig(b)
	var took []time.Duration
	for i := 0; b.Loop(); i++ {
		b.StopTimer()
		name := fmt.Sprint("infer-", i)
		pid := r.deployment(b, name, 20)
		r.hpa(b, name, 20)
		b.StartTimer()
		start := time.Now()
		r.load(b, pid, 90)
		replicas(b, r.ns, name, 2, 90*time.Second)
		took = append(took, time.Since(start))
	}
	slices.Sort(took)
	b.ReportMetric(took[len(took)/2].Seconds(), "s-median")
	b.ReportMetric(took[len(took)-1].Seconds(), "s-max")
}
