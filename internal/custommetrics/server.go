package custommetrics

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	cmv1beta2 "k8s.io/metrics/pkg/apis/custom_metrics/v1beta2"
)

// Group and Version are the API the server serves.
const (
	Group   = "custom.metrics.k8s.io"
	Version = "v1beta2"
)

// ServerConfig configures a Server.
type ServerConfig struct {
	// Client reads pods and the aggregation layer's trust, and reviews
	// callers' access.
	Client kubernetes.Interface
	Store  *Store
	// MaxAge is how old a pod's values may be and still be served.
	MaxAge time.Duration
	// Window is the windowSeconds each value reports: the agent's
	// sampling window.
	Window time.Duration
	// Now is the clock (time.Now when nil).
	Now func() time.Time
}

// Server answers the custom metrics API. Serve it over TLS with client
// certificates requested (tls.RequestClientCert): it checks the front
// proxy's certificate itself.
type Server struct {
	cfg ServerConfig

	mu    sync.Mutex
	trust *requestHeader
	at    time.Time
}

// NewServer returns a Server, or an error naming the bad field.
func NewServer(cfg ServerConfig) (*Server, error) {
	switch {
	case cfg.Client == nil:
		return nil, errors.New("custommetrics: Client is required")
	case cfg.Store == nil:
		return nil, errors.New("custommetrics: Store is required")
	case cfg.MaxAge <= 0:
		return nil, fmt.Errorf("custommetrics: MaxAge must be positive, got %v", cfg.MaxAge)
	case cfg.Window <= 0:
		return nil, fmt.Errorf("custommetrics: Window must be positive, got %v", cfg.Window)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Server{cfg: cfg}, nil
}

// requestHeader is the aggregation layer's trust, as kube-apiserver
// publishes it in kube-system/extension-apiserver-authentication.
type requestHeader struct {
	roots        *x509.CertPool
	allowedNames []string
	userHeaders  []string
	groupHeaders []string
}

// Check reads the aggregation layer's trust from kube-apiserver: an error
// says the API server cannot be reached, or runs without the aggregation
// layer.
func (s *Server) Check(ctx context.Context) error {
	_, err := s.requestHeader(ctx)
	return err
}

// trustRefresh is how long the published trust is used before it is read
// again.
const trustRefresh = time.Minute

func (s *Server) requestHeader(ctx context.Context) (*requestHeader, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.trust != nil && s.cfg.Now().Sub(s.at) < trustRefresh {
		return s.trust, nil
	}
	cm, err := s.cfg.Client.CoreV1().ConfigMaps(metav1.NamespaceSystem).Get(ctx, "extension-apiserver-authentication", metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("reading kube-system/extension-apiserver-authentication: %w", err)
	}
	rh, err := parseRequestHeader(cm)
	if err != nil {
		return nil, err
	}
	s.trust, s.at = rh, s.cfg.Now()
	return rh, nil
}

func parseRequestHeader(cm *corev1.ConfigMap) (*requestHeader, error) {
	where := "kube-system/extension-apiserver-authentication"
	ca := cm.Data["requestheader-client-ca-file"]
	if ca == "" {
		return nil, fmt.Errorf("%s: data.requestheader-client-ca-file is empty: kube-apiserver runs without the aggregation layer (--requestheader-client-ca-file)", where)
	}
	rh := &requestHeader{roots: x509.NewCertPool()}
	for rest := []byte(ca); ; {
		var b *pem.Block
		if b, rest = pem.Decode(rest); b == nil {
			break
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return nil, fmt.Errorf("%s: data.requestheader-client-ca-file: %w", where, err)
		}
		rh.roots.AddCert(c)
	}
	list := func(key string, into *[]string) error {
		v := cm.Data[key]
		if v == "" {
			return nil
		}
		if err := json.Unmarshal([]byte(v), into); err != nil {
			return fmt.Errorf("%s: data.%s: want a JSON list of strings: %w", where, key, err)
		}
		return nil
	}
	for key, into := range map[string]*[]string{
		"requestheader-allowed-names": &rh.allowedNames, "requestheader-username-headers": &rh.userHeaders,
		"requestheader-group-headers": &rh.groupHeaders,
	} {
		if err := list(key, into); err != nil {
			return nil, err
		}
	}
	if len(rh.userHeaders) == 0 {
		return nil, fmt.Errorf("%s: data.requestheader-username-headers is empty", where)
	}
	return rh, nil
}

// caller is who kube-apiserver says sent a request.
type caller struct {
	user   string
	groups []string
}

// authenticate trusts the identity headers only from a client certificate
// that the front proxy's CA signed for an allowed name.
func (s *Server) authenticate(r *http.Request) (*caller, int, error) {
	if r.TLS == nil || len(r.TLS.PeerCertificates) == 0 {
		return nil, http.StatusUnauthorized, errors.New("no client certificate: this API is served through kube-apiserver's aggregation layer only")
	}
	rh, err := s.requestHeader(r.Context())
	if err != nil {
		return nil, http.StatusInternalServerError, err
	}
	leaf := r.TLS.PeerCertificates[0]
	inter := x509.NewCertPool()
	for _, c := range r.TLS.PeerCertificates[1:] {
		inter.AddCert(c)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: rh.roots, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		return nil, http.StatusUnauthorized, fmt.Errorf("client certificate not from the front proxy's CA: %w", err)
	}
	if len(rh.allowedNames) > 0 && !slices.Contains(rh.allowedNames, leaf.Subject.CommonName) {
		return nil, http.StatusUnauthorized, fmt.Errorf("client certificate for %q, not a name the front proxy may use", leaf.Subject.CommonName)
	}
	c := &caller{}
	for _, h := range rh.userHeaders {
		if c.user = r.Header.Get(h); c.user != "" {
			break
		}
	}
	if c.user == "" {
		return nil, http.StatusUnauthorized, errors.New("no user in the identity headers")
	}
	for _, h := range rh.groupHeaders {
		c.groups = append(c.groups, r.Header.Values(h)...)
	}
	return c, 0, nil
}

// authorize asks kube-apiserver whether the caller may get the metric of
// the pod (name "*" for all the selector picks), as RBAC rules on
// custom.metrics.k8s.io name it: resource pods, subresource the metric.
func (s *Server) authorize(ctx context.Context, c *caller, namespace, name, metric string) (bool, string, error) {
	sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User: c.user, Groups: c.groups,
		ResourceAttributes: &authorizationv1.ResourceAttributes{
			Namespace: namespace, Verb: "get", Group: Group, Version: Version, Resource: "pods", Subresource: metric, Name: name,
		},
	}}
	out, err := s.cfg.Client.AuthorizationV1().SubjectAccessReviews().Create(ctx, sar, metav1.CreateOptions{})
	if err != nil {
		return false, "", fmt.Errorf("reviewing access of %s: %w", c.user, err)
	}
	return out.Status.Allowed, out.Status.Reason, nil
}

// ServeHTTP serves discovery and the per-pod reads.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		writeStatus(w, http.StatusMethodNotAllowed, "MethodNotAllowed", "only get is served")
		return
	}
	if r.URL.Path == "/healthz" || r.URL.Path == "/readyz" {
		// For the kubelet's probes, which carry no client certificate.
		_, _ = io.WriteString(w, "ok\n")
		return
	}
	c, code, err := s.authenticate(r)
	if err != nil {
		writeStatus(w, code, http.StatusText(code), err.Error())
		return
	}
	base := "/apis/" + Group + "/" + Version
	path := strings.TrimSuffix(r.URL.Path, "/")
	switch path {
	case "/apis":
		writeJSON(w, &metav1.APIGroupList{TypeMeta: metav1.TypeMeta{Kind: "APIGroupList", APIVersion: "v1"}, Groups: []metav1.APIGroup{apiGroup()}})
		return
	case "/apis/" + Group:
		g := apiGroup()
		g.TypeMeta = metav1.TypeMeta{Kind: "APIGroup", APIVersion: "v1"}
		writeJSON(w, &g)
		return
	case base:
		writeJSON(w, resourceList())
		return
	}
	// base/namespaces/{ns}/pods/{name}/{metric}
	parts := strings.Split(strings.TrimPrefix(path, base+"/"), "/")
	if !strings.HasPrefix(path, base+"/") || len(parts) != 5 || parts[0] != "namespaces" || parts[2] != "pods" {
		writeStatus(w, http.StatusNotFound, "NotFound", "served: "+base+"/namespaces/{namespace}/pods/{name or *}/{metric}")
		return
	}
	ns, name, metric := parts[1], parts[3], parts[4]
	if metric != MetricGPUUtil && metric != MetricFBUsed {
		writeStatus(w, http.StatusNotFound, "NotFound", fmt.Sprintf("metric %q is not served for pods: %s and %s are", metric, MetricGPUUtil, MetricFBUsed))
		return
	}
	if sel := r.URL.Query().Get("metricLabelSelector"); sel != "" {
		// The values carry no labels to select by: refusing says so,
		// where ignoring the selector would scale on other numbers.
		writeStatus(w, http.StatusBadRequest, "BadRequest", fmt.Sprintf("metricLabelSelector %q: %s has no labels to select by; remove the HPA's metric.selector", sel, metric))
		return
	}
	ok, why, err := s.authorize(r.Context(), c, ns, name, metric)
	switch {
	case err != nil:
		writeStatus(w, http.StatusInternalServerError, "InternalError", err.Error())
		return
	case !ok:
		writeStatus(w, http.StatusForbidden, "Forbidden", fmt.Sprintf("user %q cannot get %s/pods/%s in namespace %q: %s", c.user, Group, metric, ns, why))
		return
	}
	list, code, err := s.values(r, ns, name, metric)
	if err != nil {
		writeStatus(w, code, http.StatusText(code), err.Error())
		return
	}
	writeJSON(w, list)
}

// values reads the pods asked for and returns the values of those that
// have fresh ones.
func (s *Server) values(r *http.Request, ns, name, metric string) (*cmv1beta2.MetricValueList, int, error) {
	var pods []corev1.Pod
	if name == cmv1beta2.AllObjects {
		list, err := s.cfg.Client.CoreV1().Pods(ns).List(r.Context(), metav1.ListOptions{LabelSelector: r.URL.Query().Get("labelSelector")})
		if err != nil {
			return nil, http.StatusBadRequest, fmt.Errorf("listing pods in %s with labelSelector %q: %w", ns, r.URL.Query().Get("labelSelector"), err)
		}
		pods = list.Items
	} else {
		p, err := s.cfg.Client.CoreV1().Pods(ns).Get(r.Context(), name, metav1.GetOptions{})
		if err != nil {
			return nil, http.StatusNotFound, fmt.Errorf("reading pod %s/%s: %w", ns, name, err)
		}
		pods = []corev1.Pod{*p}
	}
	window := int64(s.cfg.Window / time.Second)
	out := &cmv1beta2.MetricValueList{TypeMeta: metav1.TypeMeta{Kind: "MetricValueList", APIVersion: Group + "/" + Version}, Items: []cmv1beta2.MetricValue{}}
	notBefore := s.cfg.Now().Add(-s.cfg.MaxAge)
	for _, p := range pods {
		v, ok := s.cfg.Store.Get(PodKey{p.Namespace, p.Name}, notBefore)
		if !ok {
			continue
		}
		q := resource.NewMilliQuantity(int64(v.UtilPercent*1000), resource.DecimalSI)
		if metric == MetricFBUsed {
			q = resource.NewMilliQuantity(int64(v.MemMiB*1000), resource.DecimalSI)
		}
		out.Items = append(out.Items, cmv1beta2.MetricValue{
			DescribedObject: corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: p.Namespace, Name: p.Name},
			Metric:          cmv1beta2.MetricIdentifier{Name: metric},
			Timestamp:       metav1.NewTime(v.At),
			WindowSeconds:   &window,
			Value:           *q,
		})
	}
	if name != cmv1beta2.AllObjects && len(out.Items) == 0 {
		return nil, http.StatusNotFound, fmt.Errorf("no %s for pod %s/%s from its node's agent in the last %v", metric, ns, name, s.cfg.MaxAge)
	}
	return out, 0, nil
}

func apiGroup() metav1.APIGroup {
	gv := metav1.GroupVersionForDiscovery{GroupVersion: Group + "/" + Version, Version: Version}
	return metav1.APIGroup{Name: Group, Versions: []metav1.GroupVersionForDiscovery{gv}, PreferredVersion: gv}
}

func resourceList() *metav1.APIResourceList {
	l := &metav1.APIResourceList{TypeMeta: metav1.TypeMeta{Kind: "APIResourceList", APIVersion: "v1"}, GroupVersion: Group + "/" + Version}
	for _, m := range []string{MetricGPUUtil, MetricFBUsed} {
		l.APIResources = append(l.APIResources, metav1.APIResource{Name: "pods/" + m, Namespaced: true, Kind: "MetricValueList", Verbs: metav1.Verbs{"get"}})
	}
	return l
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

func writeStatus(w http.ResponseWriter, code int, reason, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(&metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: metav1.StatusFailure,
		Code: int32(code), Reason: metav1.StatusReason(reason), Message: msg})
}
