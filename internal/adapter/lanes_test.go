package adapter

import (
	"encoding/pem"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"
)

// TestOpenLanesDialsEachBindConnection holds openLanes to opening every
// bind connection before the first binds: a burst of binds after it dials
// nothing, where on connections left closed each lane's first bind would
// dial while the rest of its burst waited at the cold gate.
func TestOpenLanesDialsEachBindConnection(t *testing.T) {
	var mu sync.Mutex
	versions := 0
	base, dials := tlsAPIStub(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Path == "/version" {
			mu.Lock()
			versions++
			mu.Unlock()
			_, _ = w.Write([]byte(`{"major":"1","minor":"36","gitVersion":"v1.36.3"}`))
			return
		}
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Success"}`))
	})
	counts := func() (int, int) { mu.Lock(); defer mu.Unlock(); return dials(), versions }
	proto := rest.CopyConfig(base)
	proto.ContentType = "application/vnd.kubernetes.protobuf"
	proto.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	proto.RateLimiter = flowcontrol.NewFakeAlwaysRateLimiter()
	cfg := Config{}.Defaults()
	lanes, err := bindLanes(base, proto, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(lanes) != cfg.BindConnections-1 {
		t.Fatalf("%d bind lanes, want %d", len(lanes), cfg.BindConnections-1)
	}

	openLanes(t.Context(), lanes, logr.Discard())
	deadline := time.Now().Add(10 * time.Second)
	for _, v := counts(); v < len(lanes); _, v = counts() {
		if time.Now().After(deadline) {
			t.Fatalf("openLanes asked for the version on %d of %d lanes", v, len(lanes))
		}
		time.Sleep(time.Millisecond)
	}
	opened, _ := counts()
	if opened != len(lanes) {
		t.Fatalf("openLanes opened %d connections, want one per lane (%d)", opened, len(lanes))
	}

	var wg sync.WaitGroup
	for i := range 12 * len(lanes) {
		wg.Go(func() {
			b := &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "p"}, Target: corev1.ObjectReference{Kind: "Node", Name: "n"}}
			if err := lanes[i%len(lanes)].CoreV1().Pods("a").Bind(t.Context(), b, metav1.CreateOptions{}); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if after, _ := counts(); after != opened {
		t.Fatalf("a burst of binds after openLanes dialed %d more connections, want none", after-opened)
	}
}

// tlsAPIStub serves serve over TLS with HTTP/2, as an API server does,
// until the test ends; it returns the REST config that reaches it and a
// count of the connections dialled to it so far.
func tlsAPIStub(t *testing.T, serve http.HandlerFunc) (*rest.Config, func() int) {
	var mu sync.Mutex
	dials := 0
	srv := httptest.NewUnstartedServer(serve)
	srv.EnableHTTP2 = true
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			mu.Lock()
			dials++
			mu.Unlock()
		}
	}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	cfg := &rest.Config{Host: srv.URL, TLSClientConfig: rest.TLSClientConfig{
		CAData: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})}}
	return cfg, func() int { mu.Lock(); defer mu.Unlock(); return dials }
}
