package custommetrics

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"io"
	"math/big"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	cmv1beta2 "k8s.io/metrics/pkg/apis/custom_metrics/v1beta2"
)

// issuer is a CA for the tests' client certificates.
type issuer struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newIssuer(t *testing.T) *issuer {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "ca"}, IsCA: true, BasicConstraintsValid: true,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := x509.ParseCertificate(der)
	return &issuer{cert: c, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

func (i *issuer) client(t *testing.T, cn string) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, i.cert, &key.PublicKey, i.key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

func TestServer(t *testing.T) {
	proxyCA, otherCA := newIssuer(t), newIssuer(t)
	now := time.Unix(10000, 0)
	pod := func(name, app string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: name, Labels: map[string]string{"app": app}}}
	}
	client := fake.NewClientset(
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "extension-apiserver-authentication"}, Data: map[string]string{
			"requestheader-client-ca-file":   string(proxyCA.pem),
			"requestheader-allowed-names":    `["front-proxy-client"]`,
			"requestheader-username-headers": `["X-Remote-User"]`,
			"requestheader-group-headers":    `["X-Remote-Group"]`,
		}},
		pod("infer-a", "infer"), pod("infer-b", "infer"), pod("infer-stale", "infer"), pod("other", "other"),
	)
	// Only the HPA controller may read.
	var reviewed []authorizationv1.SubjectAccessReviewSpec
	client.PrependReactor("create", "subjectaccessreviews", func(a clienttesting.Action) (bool, runtime.Object, error) {
		sar := a.(clienttesting.CreateAction).GetObject().(*authorizationv1.SubjectAccessReview)
		reviewed = append(reviewed, sar.Spec)
		sar.Status.Allowed = sar.Spec.User == "system:serviceaccount:kube-system:horizontal-pod-autoscaler"
		sar.Status.Reason = "RBAC"
		return true, sar, nil
	})
	store := NewStore()
	store.Replace(map[PodKey]PodGPU{
		{"ml", "infer-a"}:     {UtilPercent: 90, MemMiB: 1024, At: now},
		{"ml", "infer-b"}:     {UtilPercent: 30.5, MemMiB: 512, At: now.Add(-time.Second)},
		{"ml", "infer-stale"}: {UtilPercent: 99, At: now.Add(-time.Minute)},
	})
	srv, err := NewServer(ServerConfig{Client: client, Store: store, MaxAge: 10 * time.Second, Window: 5 * time.Second, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewUnstartedServer(srv)
	ts.TLS = &tls.Config{ClientAuth: tls.RequestClientCert, MinVersion: tls.VersionTLS12}
	ts.StartTLS()
	defer ts.Close()
	get := func(t *testing.T, cert *tls.Certificate, user, path string) (int, string) {
		t.Helper()
		tr := ts.Client().Transport.(*http.Transport).Clone()
		if cert != nil {
			tr.TLSClientConfig.Certificates = []tls.Certificate{*cert}
		}
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, ts.URL+path, nil)
		if user != "" {
			req.Header.Set("X-Remote-User", user)
			req.Header.Add("X-Remote-Group", "system:serviceaccounts")
		}
		resp, err := (&http.Client{Transport: tr}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	proxy := proxyCA.client(t, "front-proxy-client")
	wrongName := proxyCA.client(t, "someone")
	foreign := otherCA.client(t, "front-proxy-client")
	const hpa = "system:serviceaccount:kube-system:horizontal-pod-autoscaler"
	all := "/apis/custom.metrics.k8s.io/v1beta2/namespaces/ml/pods/*/DCGM_FI_DEV_GPU_UTIL?labelSelector=app%3Dinfer"

	refusals := []struct {
		name string
		cert *tls.Certificate
		user string
		path string
		code int
		says string
	}{
		{"no client certificate", nil, hpa, all, http.StatusUnauthorized, "aggregation layer only"},
		{"another CA's certificate", &foreign, hpa, all, http.StatusUnauthorized, "not from the front proxy's CA"},
		{"a name the front proxy does not use", &wrongName, hpa, all, http.StatusUnauthorized, "not a name the front proxy may use"},
		{"no user", &proxy, "", all, http.StatusUnauthorized, "no user"},
		{"a user RBAC refuses", &proxy, "alice", all, http.StatusForbidden, "alice\\\" cannot get"},
		{"a metric not served", &proxy, hpa, "/apis/custom.metrics.k8s.io/v1beta2/namespaces/ml/pods/*/cpu", http.StatusNotFound, "DCGM_FI_DEV_GPU_UTIL and DCGM_FI_DEV_FB_USED are"},
		{"a pod with only stale values", &proxy, hpa, "/apis/custom.metrics.k8s.io/v1beta2/namespaces/ml/pods/infer-stale/DCGM_FI_DEV_GPU_UTIL", http.StatusNotFound, "in the last 10s"},
		{"a metric label selector", &proxy, hpa, all + "&metricLabelSelector=gpu%3D0", http.StatusBadRequest, "remove the HPA's metric.selector"},
		{"a write", &proxy, hpa, "", http.StatusMethodNotAllowed, ""},
	}
	for _, tc := range refusals {
		t.Run(tc.name, func(t *testing.T) {
			if tc.code == http.StatusMethodNotAllowed {
				resp, err := ts.Client().Post(ts.URL+all, "application/json", strings.NewReader("{}")) //nolint:noctx // a test request
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if resp.StatusCode != tc.code {
					t.Errorf("POST: %d, want %d", resp.StatusCode, tc.code)
				}
				return
			}
			code, body := get(t, tc.cert, tc.user, tc.path)
			if code != tc.code || !strings.Contains(body, tc.says) {
				t.Errorf("%d %s, want %d saying %q", code, body, tc.code, tc.says)
			}
		})
	}

	t.Run("the pods the selector picks, fresh values only", func(t *testing.T) {
		reviewed = nil
		code, body := get(t, &proxy, hpa, all)
		if code != http.StatusOK {
			t.Fatalf("%d %s", code, body)
		}
		var list cmv1beta2.MetricValueList
		if err := json.Unmarshal([]byte(body), &list); err != nil {
			t.Fatal(err)
		}
		got := map[string]string{}
		for _, it := range list.Items {
			got[it.DescribedObject.Name] = it.Value.String()
			if it.Metric.Name != MetricGPUUtil || it.DescribedObject.Kind != "Pod" || *it.WindowSeconds != 5 {
				t.Errorf("item %+v", it)
			}
		}
		if len(got) != 2 || got["infer-a"] != "90" || got["infer-b"] != "30500m" {
			t.Errorf("values %v, want infer-a 90 and infer-b 30500m (the stale pod and the other app's left out)", got)
		}
		want := authorizationv1.ResourceAttributes{Namespace: "ml", Verb: "get", Group: Group, Version: Version, Resource: "pods", Subresource: MetricGPUUtil, Name: "*"}
		if len(reviewed) != 1 || *reviewed[0].ResourceAttributes != want || reviewed[0].Groups[0] != "system:serviceaccounts" {
			t.Errorf("reviewed %+v, want one review of %+v with the caller's groups", reviewed, want)
		}
	})
	t.Run("one pod's memory", func(t *testing.T) {
		code, body := get(t, &proxy, hpa, "/apis/custom.metrics.k8s.io/v1beta2/namespaces/ml/pods/infer-b/DCGM_FI_DEV_FB_USED")
		if code != http.StatusOK || !strings.Contains(body, `"value":"512"`) {
			t.Errorf("%d %s, want infer-b's 512 MiB", code, body)
		}
	})
	t.Run("discovery", func(t *testing.T) {
		code, body := get(t, &proxy, hpa, "/apis/custom.metrics.k8s.io/v1beta2")
		if code != http.StatusOK || !strings.Contains(body, `"name":"pods/DCGM_FI_DEV_GPU_UTIL"`) || !strings.Contains(body, `"name":"pods/DCGM_FI_DEV_FB_USED"`) {
			t.Errorf("%d %s, want both metrics listed", code, body)
		}
	})
}

func TestNewServerNamesTheBadField(t *testing.T) {
	client, store := fake.NewClientset(), NewStore()
	for _, tc := range []struct {
		cfg  ServerConfig
		says string
	}{
		{ServerConfig{Store: store, MaxAge: time.Second, Window: time.Second}, "Client"},
		{ServerConfig{Client: client, MaxAge: time.Second, Window: time.Second}, "Store"},
		{ServerConfig{Client: client, Store: store, Window: time.Second}, "MaxAge"},
		{ServerConfig{Client: client, Store: store, MaxAge: time.Second}, "Window"},
	} {
		if _, err := NewServer(tc.cfg); err == nil || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("NewServer(%+v) = %v, want an error naming %s", tc.cfg, err, tc.says)
		}
	}
}
