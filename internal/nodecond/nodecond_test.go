package nodecond

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
)

// fakeNodes records the condition of every patch; fail makes the next
// patches fail.
type fakeNodes struct {
	sent []sent
	fail bool
}

type sent struct {
	node, manager         string
	status, reason        string
	heartbeat, transition string
}

func (f *fakeNodes) Patch(_ context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, sub ...string) (*corev1.Node, error) {
	if f.fail {
		return nil, errors.New("the API server is away")
	}
	if pt != types.ApplyPatchType || opts.Force == nil || !*opts.Force || len(sub) != 1 || sub[0] != "status" {
		return nil, errors.New("not a forced server-side apply of the status")
	}
	var body struct {
		Status struct {
			Conditions []map[string]string `json:"conditions"`
		} `json:"status"`
	}
	if err := json.Unmarshal(data, &body); err != nil {
		return nil, err
	}
	c := body.Status.Conditions[0]
	f.sent = append(f.sent, sent{node: name, manager: opts.FieldManager, status: c["status"], reason: c["reason"],
		heartbeat: c["lastHeartbeatTime"], transition: c["lastTransitionTime"]})
	return &corev1.Node{}, nil
}

// step is one call to the writer at minute at of the test's clock.
type step struct {
	at    int
	cond  Condition
	force bool // Write instead of Set
	fail  bool
	// want: the write expected (none when wrote is false), with its
	// transition minute.
	wrote      bool
	transition int
}

var (
	down      = Condition{corev1.ConditionFalse, "NoGPUs", "no GPUs"}
	downOther = Condition{corev1.ConditionFalse, "HealthMonitorDown", "no events"}
	downMsg   = Condition{corev1.ConditionFalse, "NoGPUs", "still no GPUs"}
	up        = Condition{corev1.ConditionTrue, "AgentReady", "8 GPUs"}
)

// The transition rules: lastTransitionTime moves on the first write and
// when the status changes, never on a new reason or message; Set skips
// the condition last written, Write does not; a failed write is
// forgotten.
func TestWriterTransitions(t *testing.T) {
	start := time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)
	minute := func(m int) string { return start.Add(time.Duration(m) * time.Minute).Format(time.RFC3339) }
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"first write sets the transition", []step{{at: 3, cond: down, wrote: true, transition: 3}}},
		{"the same condition is not written again", []step{
			{at: 0, cond: down, wrote: true, transition: 0},
			{at: 1, cond: down},
		}},
		{"a new reason keeps the transition", []step{
			{at: 0, cond: down, wrote: true, transition: 0},
			{at: 1, cond: downOther, wrote: true, transition: 0},
		}},
		{"a new message keeps the transition", []step{
			{at: 0, cond: down, wrote: true, transition: 0},
			{at: 1, cond: downMsg, wrote: true, transition: 0},
		}},
		{"a new status moves the transition", []step{
			{at: 0, cond: down, wrote: true, transition: 0},
			{at: 1, cond: up, wrote: true, transition: 1},
			{at: 2, cond: down, wrote: true, transition: 2},
		}},
		{"Write refreshes the heartbeat and keeps the transition", []step{
			{at: 0, cond: up, force: true, wrote: true, transition: 0},
			{at: 1, cond: up, force: true, wrote: true, transition: 0},
		}},
		{"a failed first write is retried as the first", []step{
			{at: 0, cond: down, fail: true},
			{at: 1, cond: down, wrote: true, transition: 1},
		}},
		{"a failed change of status moves the transition when written", []step{
			{at: 0, cond: down, wrote: true, transition: 0},
			{at: 1, cond: up, fail: true},
			{at: 2, cond: up, wrote: true, transition: 2},
		}},
		{"a failed change of status that reverts keeps the transition", []step{
			{at: 0, cond: down, wrote: true, transition: 0},
			{at: 1, cond: up, fail: true},
			{at: 2, cond: downOther, wrote: true, transition: 0},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeNodes{}
			w := New(f, "gpu-node-1", "GPUReady", "gpuplane-agent-condition")
			var now time.Time
			w.Now = func() time.Time { return now }
			for i, s := range tc.steps {
				now = start.Add(time.Duration(s.at) * time.Minute)
				f.fail = s.fail
				before := len(f.sent)
				var err error
				if s.force {
					err = w.Write(context.Background(), s.cond)
				} else {
					_, err = w.Set(context.Background(), s.cond)
				}
				if s.fail != (err != nil) {
					t.Fatalf("step %d: error %v, want failure %v", i, err, s.fail)
				}
				if got := len(f.sent) - before; got != map[bool]int{false: 0, true: 1}[s.wrote] {
					t.Fatalf("step %d: %d writes, want wrote=%v", i, got, s.wrote)
				}
				if !s.wrote {
					continue
				}
				got := f.sent[len(f.sent)-1]
				want := sent{node: "gpu-node-1", manager: "gpuplane-agent-condition", status: string(s.cond.Status), reason: s.cond.Reason,
					heartbeat: minute(s.at), transition: minute(s.transition)}
				if got != want {
					t.Errorf("step %d: wrote %+v, want %+v", i, got, want)
				}
			}
		})
	}
}

// Set reports whether it wrote; Last is what was written.
func TestSetReportsWrites(t *testing.T) {
	w := New(&fakeNodes{}, "n", "GPUReady", "m")
	if _, ok := w.Last(); ok {
		t.Error("Last before any write: ok, want none")
	}
	for i, want := range []bool{true, false} {
		if wrote, err := w.Set(context.Background(), down); err != nil || wrote != want {
			t.Errorf("call %d: wrote %v (%v), want %v", i, wrote, err, want)
		}
	}
	if c, ok := w.Last(); !ok || c != down {
		t.Errorf("Last: %+v %v, want %+v", c, ok, down)
	}
}

// REST sends the apply to the Node's status with the field manager and
// force as query parameters.
func TestREST(t *testing.T) {
	var got *http.Request
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"kind":"Node","apiVersion":"v1","metadata":{"name":"gpu-node-1"}}`))
	}))
	defer srv.Close()
	client, err := rest.RESTClientFor(&rest.Config{Host: srv.URL, APIPath: "/api", ContentConfig: rest.ContentConfig{
		GroupVersion: &schema.GroupVersion{Version: "v1"}, NegotiatedSerializer: scheme.Codecs.WithoutConversion()}})
	if err != nil {
		t.Fatal(err)
	}
	w := New(REST(client), "gpu-node-1", "GPUQuarantine", "gpuplane-agent-quarantine")
	if err := w.Write(context.Background(), up); err != nil {
		t.Fatal(err)
	}
	want := url.Values{"fieldManager": {"gpuplane-agent-quarantine"}, "force": {"true"}}
	if got.Method != http.MethodPatch || got.URL.Path != "/api/v1/nodes/gpu-node-1/status" || got.URL.Query().Encode() != want.Encode() ||
		got.Header.Get("Content-Type") != string(types.ApplyPatchType) {
		t.Errorf("sent %s %s (%s), want an apply patch of the status with %s", got.Method, got.URL, got.Header.Get("Content-Type"), want.Encode())
	}
}
