// Package custommetrics_test runs gpuplane's custom metrics API behind a
// real kube-apiserver's aggregation layer, fed by the agent's real
// exporter over a simulated node, and has kube-controller-manager's real
// HPA controller scale a Deployment on the GPU utilisation it serves.
package custommetrics_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/dynamic"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
	"k8s.io/utils/ptr"

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

func (l *lister) List(context.Context) (*podresourcesv1.ListPodResourcesResponse, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.resp == nil {
		return &podresourcesv1.ListPodResourcesResponse{}, nil
	}
	return l.resp, nil
}

// selfSigned returns a serving certificate for ip and the Service
// name.ns (the name kube-apiserver checks) and its PEM.
func selfSigned(t testing.TB, ip, name, ns string) (tls.Certificate, []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "gpuplane-custom-metrics"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.ParseIP(ip)}, DNSNames: []string{name + "." + ns + ".svc"}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// endpoints makes a Service without selector in namespace ns whose one
// endpoint is addr (host:port), on port name.
func endpoints(t *testing.T, ns, name, port, addr string) {
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

func listen(t *testing.T, ip string) net.Listener {
	t.Helper()
	ln, err := (&net.ListenConfig{}).Listen(t.Context(), "tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

var apiServices = schema.GroupVersionResource{Group: "apiregistration.k8s.io", Version: "v1", Resource: "apiservices"}

// An HPA on DCGM_FI_DEV_GPU_UTIL, read through the aggregated custom
// metrics API, scales an inference Deployment when its pod's GPU load
// rises: the agent's exporter measures the load of the pod's process on a
// simulated H100, the scraper reads the exporter, the server answers
// kube-apiserver, and kube-controller-manager's HPA controller decides.
func TestHPAScalesOnGPUUtilization(t *testing.T) {
	ctx := t.Context()
	ip := hostIP(t)
	ns := env.CreateNamespace(t)
	if err := env.CreateNodes(ctx, []*corev1.Node{framework.GPUNode("gpu-0").GPUs(8).Obj()}, 1); err != nil {
		t.Fatal(err)
	}
	env.WaitNodesReady(t, "", 1, 60*time.Second)
	env.WaitNodesUntainted(t, "", 60*time.Second)

	// The inference Deployment: one replica on the GPU node to start.
	labels := map[string]string{"app": "infer"}
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "infer"}, Spec: appsv1.DeploymentSpec{
		Replicas: ptr.To(int32(1)), Selector: &metav1.LabelSelector{MatchLabels: labels},
		Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{
			NodeName:   "gpu-0",
			Containers: []corev1.Container{{Name: "main", Image: "infer"}},
		}},
	}}
	if _, err := env.Client.AppsV1().Deployments(ns).Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var first string
	framework.Eventually(t, 60*time.Second, "the first replica running", func(ctx context.Context) (bool, error) {
		pods, err := env.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=infer"})
		if err != nil || len(pods.Items) != 1 {
			return false, err
		}
		first = pods.Items[0].Name
		return pods.Items[0].Status.Phase == corev1.PodRunning, nil
	})

	// The node's agent: its real exporter over a simulated DGX H100 on
	// which the replica's process holds GPU 0 at 20%.
	node := metricstest.NewNode(t, "dgxh100", "gpu-0")
	gpu0 := node.Devices(t)[0]
	const pid = 4242
	node.AddPod(t, metricstest.Pod{Namespace: ns, Name: first, Container: "main", Resource: "nvidia.com/gpu",
		DeviceID: gpu0.UUID, GPU: 0, PID: pid, MemMiB: 20000, Util: 20})
	node.WriteCheckpoint(t)
	node.Clock.Advance(time.Minute)
	pr := &lister{resp: node.Response()}
	exp, err := metrics.NewExporter(metrics.Options{GPUs: node.Backend, PodResources: pr, ProcRoot: node.ProcRoot,
		CheckpointPath: node.CheckpointPath, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	h, err := metrics.NewHandler(exp)
	if err != nil {
		t.Fatal(err)
	}
	agentLn := listen(t, ip)
	agentSrv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = agentSrv.Serve(agentLn) }()
	t.Cleanup(func() { _ = agentSrv.Close() })
	endpoints(t, ns, "gpuplane-agent-metrics", "metrics", agentLn.Addr().String())

	// The custom metrics API: the scraper reads the agents the Service
	// lists; the server answers behind the aggregation layer.
	store := custommetrics.NewStore()
	sc, err := custommetrics.NewScraper(custommetrics.ScraperConfig{Client: env.Client, Store: store, Namespace: ns,
		Service: "gpuplane-agent-metrics", Port: "metrics", Scheme: "http", Interval: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	sctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); sc.Run(sctx) }()
	t.Cleanup(func() { cancel(); <-done })
	srv, err := custommetrics.NewServer(custommetrics.ServerConfig{Client: env.Client, Store: store, MaxAge: 5 * time.Second, Window: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	cert, caPEM := selfSigned(t, ip, "gpuplane-custom-metrics", ns)
	apiLn := tls.NewListener(listen(t, ip), &tls.Config{Certificates: []tls.Certificate{cert}, ClientAuth: tls.RequestClientCert, MinVersion: tls.VersionTLS12})
	apiSrv := &http.Server{Handler: srv, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = apiSrv.Serve(apiLn) }()
	t.Cleanup(func() { _ = apiSrv.Close() })
	endpoints(t, ns, "gpuplane-custom-metrics", "https", apiLn.Addr().String())

	dyn, err := dynamic.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	apiSvc := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
		"metadata": map[string]any{"name": custommetrics.Version + "." + custommetrics.Group},
		"spec": map[string]any{
			"group": custommetrics.Group, "version": custommetrics.Version,
			"service":              map[string]any{"namespace": ns, "name": "gpuplane-custom-metrics", "port": int64(443)},
			"caBundle":             base64.StdEncoding.EncodeToString(caPEM),
			"groupPriorityMinimum": int64(100), "versionPriority": int64(200),
		},
	}}
	if _, err := dyn.Resource(apiServices).Create(ctx, apiSvc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = dyn.Resource(apiServices).Delete(context.Background(), apiSvc.GetName(), metav1.DeleteOptions{})
	})

	// Through kube-apiserver, as the HPA controller reads it.
	path := fmt.Sprintf("/apis/%s/%s/namespaces/%s/pods/*/%s", custommetrics.Group, custommetrics.Version, ns, custommetrics.MetricGPUUtil)
	framework.Eventually(t, 60*time.Second, "the pod's GPU utilisation through kube-apiserver", func(ctx context.Context) (bool, error) {
		body, err := env.Client.CoreV1().RESTClient().Get().AbsPath(path).Param("labelSelector", "app=infer").DoRaw(ctx)
		if err != nil {
			return false, fmt.Errorf("%w: %s", err, body)
		}
		return strings.Contains(string(body), `"value":"20"`), fmt.Errorf("answer %s", body)
	})

	// The HPA: 50% GPU utilisation per pod on average.
	hpa := &autoscalingv2.HorizontalPodAutoscaler{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "infer"}, Spec: autoscalingv2.HorizontalPodAutoscalerSpec{
		ScaleTargetRef: autoscalingv2.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "infer"},
		MinReplicas:    ptr.To(int32(1)), MaxReplicas: 4,
		Metrics: []autoscalingv2.MetricSpec{{Type: autoscalingv2.PodsMetricSourceType, Pods: &autoscalingv2.PodsMetricSource{
			Metric: autoscalingv2.MetricIdentifier{Name: custommetrics.MetricGPUUtil},
			Target: autoscalingv2.MetricTarget{Type: autoscalingv2.AverageValueMetricType, AverageValue: resource.NewQuantity(50, resource.DecimalSI)},
		}}},
	}}
	if _, err := env.Client.AutoscalingV2().HorizontalPodAutoscalers(ns).Create(ctx, hpa, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// At 20% the HPA reads the metric and keeps one replica.
	framework.Eventually(t, 90*time.Second, "the HPA reading 20", func(ctx context.Context) (bool, error) {
		h, err := env.Client.AutoscalingV2().HorizontalPodAutoscalers(ns).Get(ctx, "infer", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, m := range h.Status.CurrentMetrics {
			if m.Pods != nil && m.Pods.Current.AverageValue != nil && m.Pods.Current.AverageValue.Value() == 20 {
				return h.Status.DesiredReplicas == 1, fmt.Errorf("desired %d", h.Status.DesiredReplicas)
			}
		}
		return false, fmt.Errorf("current metrics %+v, conditions %+v", h.Status.CurrentMetrics, h.Status.Conditions)
	})
	// The load rises to 90%: two replicas (90 / 50, rounded up).
	if err := node.Backend.SetProcessLoad(pid, 90, 90); err != nil {
		t.Fatal(err)
	}
	node.Clock.Advance(time.Minute)
	framework.Eventually(t, 90*time.Second, "the Deployment scaled to 2", func(ctx context.Context) (bool, error) {
		d, err := env.Client.AppsV1().Deployments(ns).Get(ctx, "infer", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return *d.Spec.Replicas == 2, fmt.Errorf("%d replicas", *d.Spec.Replicas)
	})
}
