package adapter

import (
	"fmt"
	"io"
	"net/http"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
)

// TestBareBinderBindsOverRunsConnections holds the bare binder to
// gpuplane-scheduler's bind pipeline: every pod bound to the node given,
// with its UID, as a protobuf Binding, over as many connections as Run
// opens (the shared one and each bind lane), and a pod with no node
// refused rather than sent.
func TestBareBinderBindsOverRunsConnections(t *testing.T) {
	var mu sync.Mutex
	perConn := map[string]int{}
	bound := map[string]string{}
	var bad []string
	rc, dials := tlsAPIStub(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Path == "/version" {
			_, _ = w.Write([]byte(`{"major":"1","minor":"36","gitVersion":"v1.36.3"}`))
			return
		}
		body, err := io.ReadAll(r.Body)
		var b *corev1.Binding
		if err == nil {
			var obj runtime.Object
			if obj, err = runtime.Decode(clientgoscheme.Codecs.UniversalDeserializer(), body); err == nil {
				var ok bool
				if b, ok = obj.(*corev1.Binding); !ok {
					err = fmt.Errorf("a %T, not a Binding", obj)
				}
			}
		}
		mu.Lock()
		defer mu.Unlock()
		switch {
		case err != nil:
			bad = append(bad, fmt.Sprintf("%s %s: %v", r.Method, r.URL.Path, err))
		case r.Header.Get("Content-Type") != "application/vnd.kubernetes.protobuf":
			bad = append(bad, fmt.Sprintf("%s %s sent as %s, not protobuf", r.Method, r.URL.Path, r.Header.Get("Content-Type")))
		case r.URL.Path != "/api/v1/namespaces/ns/pods/"+b.Name+"/binding" || b.UID != types.UID("uid-"+b.Name):
			bad = append(bad, fmt.Sprintf("%s %s: binding of %s (uid %s)", r.Method, r.URL.Path, b.Name, b.UID))
		default:
			bound[b.Name] = b.Target.Name
			perConn[r.RemoteAddr]++
		}
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Success"}`))
	})
	cfg := Config{RESTConfig: rc, QPS: 1e6, Burst: 1e6}
	b, err := NewBareBinder(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	// Run's informers list on the shared connection before the first
	// bind; so does the benchmark's bare binder (its list of the pods).
	if _, err := b.Client().Discovery().ServerVersion(); err != nil {
		t.Fatal(err)
	}
	const pods = 400
	var wg sync.WaitGroup
	var errMu sync.Mutex
	var errs []error
	for i := range pods {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: fmt.Sprintf("p-%03d", i), UID: types.UID(fmt.Sprintf("uid-p-%03d", i))}}
		wg.Add(1)
		b.Bind(t.Context(), p, fmt.Sprintf("n-%d", i%7), func(err error) {
			defer wg.Done()
			if err != nil {
				errMu.Lock()
				errs = append(errs, err)
				errMu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("%d binds failed, the first: %v", len(errs), errs[0])
	}
	var refused error
	b.Bind(t.Context(), &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "nowhere"}}, "", func(err error) { refused = err })
	if refused == nil {
		t.Fatal("a bind with no node was accepted")
	}

	mu.Lock()
	defer mu.Unlock()
	if len(bad) > 0 {
		t.Fatalf("%d requests were not the pod's binding, the first: %s", len(bad), bad[0])
	}
	if len(bound) != pods {
		t.Fatalf("%d of %d pods bound", len(bound), pods)
	}
	for i := range pods {
		if name, want := fmt.Sprintf("p-%03d", i), fmt.Sprintf("n-%d", i%7); bound[name] != want {
			t.Fatalf("%s bound to %q, want %q", name, bound[name], want)
		}
	}
	want := Config{}.Defaults().BindConnections
	if dials() != want || len(perConn) != want {
		t.Fatalf("binds over %d connections (%d dialed), want Run's %d", len(perConn), dials(), want)
	}
}
