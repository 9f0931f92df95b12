package ui

import (
	"bufio"
	"cmp"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/gpuplane/gpuplane/api/gpunode"
	"github.com/gpuplane/gpuplane/api/gpupod"
	"github.com/gpuplane/gpuplane/api/scheduling/v1alpha1"
	"github.com/gpuplane/gpuplane/internal/testutil/build"
)

func newTestServer(t *testing.T) *Server {
	t.Helper()
	s, err := NewServer(Config{SchedulerName: v1alpha1.SchedulerName, PoolLabels: []string{"pool"}, Price: 2})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func gpuNode(name string, gpus int) *corev1.Node {
	n := build.Node(name).CPU("64").Memory("512Gi").Pods(110).Product("NVIDIA-H100-80GB-HBM3", 81559).GPUs(gpus).
		Label("pool", "train").Label("topology.kubernetes.io/zone", "z1").Obj()
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
	return n
}

// running is a pod of the scheduler's bound to node, holding GPUs idx,
// started ago, with a deadline when deadline > 0.
func running(ns, name, node string, gpus int, idx string, ago, deadline time.Duration) *corev1.Pod {
	p := build.Pod(ns, name).GPUs(gpus).SchedulerName(v1alpha1.SchedulerName).NodeName(node).Phase(corev1.PodRunning).
		Annotation(gpupod.GPUsAnnotation, idx).Label(v1alpha1.QueueLabel, "team-a").Obj()
	start := metav1.NewTime(time.Now().Add(-ago))
	p.CreationTimestamp = start
	p.Status.StartTime = &start
	if deadline > 0 {
		p.Spec.ActiveDeadlineSeconds = ptr.To(int64(deadline.Seconds()))
	}
	return p
}

func gangPod(ns, group string, i, gpus int) *corev1.Pod {
	return build.Pod(ns, fmt.Sprintf("%s-%d", group, i)).GPUs(gpus).SchedulerName(v1alpha1.SchedulerName).
		Label(v1alpha1.PodGroupLabel, group).Label(v1alpha1.QueueLabel, "team-a").Phase(corev1.PodPending).Obj()
}

func feed(s *Server, objs ...any) {
	for _, o := range objs {
		s.Feed(o, false)
	}
	s.Rebuild()
}

func state(t *testing.T, s *Server) *State {
	t.Helper()
	var st State
	if err := json.Unmarshal(s.state, &st); err != nil {
		t.Fatal(err)
	}
	return &st
}

func TestMapShowsHoldersPartsAndQuarantine(t *testing.T) {
	s := newTestServer(t)
	n := gpuNode("n1", 4)
	n.Annotations = map[string]string{gpunode.QuarantineAnnotation: `{"v":1,"gpus":[{"gpu":3,"uuid":"GPU-3","xid":79,"class":"bus","state":"held","since":"2026-11-27T10:00:00Z","fails":0}]}`,
		gpunode.TopologyAnnotation: `{"v":1,"gpus":4,"groups":[{"gpus":[0,1,2,3],"nvlinks":18}],"numa":[0,0,1,1]}`}
	n.Status.Allocatable[gpunode.ResourceGPU] = resource.MustParse("3")
	n.Status.Conditions = append(n.Status.Conditions, corev1.NodeCondition{Type: gpunode.ConditionGPUQuarantine, Status: corev1.ConditionTrue, Message: "GPU 3: XID 79"})
	half := build.Pod("ml", "half").GPUs(1).SchedulerName(v1alpha1.SchedulerName).NodeName("n1").Phase(corev1.PodRunning).
		Annotation(gpupod.FractionAnnotation, "0.5").Annotation(gpupod.GPUsAnnotation, "2:500").Obj()
	feed(s, n, running("ml", "whole", "n1", 2, "0,1", time.Hour, 0), half, build.Queue("team-a").GPUs("4", "8").Obj())
	st := state(t, s)
	if len(st.Nodes) != 1 {
		t.Fatalf("nodes %+v, want n1", st.Nodes)
	}
	nv := st.Nodes[0]
	if nv.Pool != "train" || nv.Labels["topology.kubernetes.io/zone"] != "z1" || !strings.Contains(nv.NVLink, "GPUs 0-3 x18") {
		t.Errorf("node pool %q labels %v nvlink %q", nv.Pool, nv.Labels, nv.NVLink)
	}
	if !strings.Contains(nv.Problem, "quarantine: GPU 3: XID 79") {
		t.Errorf("problem %q, want the quarantine", nv.Problem)
	}
	want := map[int]string{0: "ml/whole whole", 1: "ml/whole whole", 2: "ml/half 0.50 GPU"}
	for _, g := range nv.GPUs {
		var got []string
		for _, h := range g.Holders {
			got = append(got, h.Pod+" "+cmp.Or(h.Part, "whole"))
		}
		if strings.Join(got, ";") != want[g.Index] {
			t.Errorf("GPU %d held by %v, want %q", g.Index, got, want[g.Index])
		}
	}
	if g := nv.GPUs[3]; !strings.Contains(g.Withdrawn, "quarantined: XID 79, held") {
		t.Errorf("GPU 3 withdrawn %q, want quarantined: XID 79, held", g.Withdrawn)
	}
	if nv.Free != "parts 0.50" {
		t.Errorf("free %q, want parts 0.50 (GPU 3 is out of service)", nv.Free)
	}
	if len(st.Running) != 2 || st.Running[0].Group != "pod/ml/whole" || st.Running[0].GPUs != 2 || st.Running[0].GPUHours < 1.99 {
		t.Errorf("running %+v, want ml/whole first with 2 GPUs for about 2 GPU-hours", st.Running)
	}
	if len(st.Queues) != 1 || st.Queues[0].Guaranteed != "4" || st.Queues[0].Limit != "8" {
		t.Errorf("queues %+v", st.Queues)
	}
	if len(st.Cost.ByNamespace) != 1 || st.Cost.ByNamespace[0].Name != "ml" || st.Cost.ByNamespace[0].Cost < 5 {
		t.Errorf("cost %+v, want ml at about 2.5 GPU-hours, cost 5", st.Cost)
	}
}

func TestWhatIf(t *testing.T) {
	cases := []struct {
		name    string
		objs    func() []any
		group   string
		verdict string
		summary string
	}{{
		name: "fits when the job with the nearest deadline ends",
		objs: func() []any {
			return []any{gpuNode("n1", 8), build.Queue("team-a").Obj(),
				running("ml", "long", "n1", 4, "0,1,2,3", time.Hour, 0),
				running("ml", "short", "n1", 4, "4,5,6,7", 10*time.Minute, 50*time.Minute),
				build.PodGroup("ml", "gang", 2).Queue("team-a").Obj(), gangPod("ml", "gang", 0, 2), gangPod("ml", "gang", 1, 2)}
		},
		group: "pg/ml/gang", verdict: FitsWhenEnds, summary: "fits when job pod/ml/short ends (in about 40 min",
	}, {
		name: "never fits: more GPUs than the cluster has",
		objs: func() []any {
			return []any{gpuNode("n1", 8), build.Queue("team-a").Obj(),
				build.PodGroup("ml", "big", 3).Queue("team-a").Obj(), gangPod("ml", "big", 0, 4), gangPod("ml", "big", 1, 4), gangPod("ml", "big", 2, 4)}
		},
		group: "pg/ml/big", verdict: NeverFits, summary: "never fits: ",
	}, {
		name: "fits if another queue lends GPUs",
		objs: func() []any {
			return []any{gpuNode("n1", 8), build.Queue("root").Obj(), build.Queue("team-a").Parent("root").GPUs("2", "4").Obj(),
				build.Queue("team-b").Parent("root").GPUs("6", "").Obj(), running("ml", "small", "n1", 2, "0,1", time.Hour, 0),
				build.PodGroup("ml", "gang", 2).Queue("team-a").Obj(), gangPod("ml", "gang", 0, 2), gangPod("ml", "gang", 1, 2)}
		},
		group: "pg/ml/gang", verdict: FitsIfLent, summary: "fits if queue team-b lends 2 GPU(s)",
	}, {
		name: "fits now",
		objs: func() []any {
			return []any{gpuNode("n1", 8), build.Queue("team-a").Obj(),
				build.PodGroup("ml", "gang", 2).Queue("team-a").Obj(), gangPod("ml", "gang", 0, 2), gangPod("ml", "gang", 1, 2)}
		},
		group: "pg/ml/gang", verdict: FitsNow, summary: "fits now, on n1",
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := newTestServer(t)
			feed(s, tc.objs()...)
			srv := httptest.NewServer(s.Handler())
			defer srv.Close()
			res, err := http.Get(srv.URL + "/api/whatif?group=" + tc.group)
			if err != nil {
				t.Fatal(err)
			}
			defer res.Body.Close()
			var w WhatIf
			if err := json.NewDecoder(res.Body).Decode(&w); err != nil {
				t.Fatalf("status %d: %v", res.StatusCode, err)
			}
			if w.Verdict != tc.verdict || !strings.Contains(w.Summary, tc.summary) {
				t.Errorf("what-if %+v, want verdict %s and a summary with %q", w, tc.verdict, tc.summary)
			}
			if w.Runs < 1 {
				t.Errorf("runs %d: the answer must come from the core", w.Runs)
			}
		})
	}
}

func TestWaitingCarriesTheGroup(t *testing.T) {
	s := newTestServer(t)
	pg := build.PodGroup("ml", "gang", 2).Queue("team-a").Obj()
	pg.Status.Conditions = []metav1.Condition{{Type: v1alpha1.ConditionSchedulable, Status: metav1.ConditionFalse, Reason: "Unschedulable", Message: "gang 0/2 placeable"}}
	lone := build.Pod("ml", "solo").GPUs(16).SchedulerName(v1alpha1.SchedulerName).Phase(corev1.PodPending).Obj()
	lone.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Message: "0/1 nodes: GPU"}}
	// A pod whose GPU limit and request differ is held back by the
	// scheduler, with its reason.
	bad := build.Pod("ml", "bad").SchedulerName(v1alpha1.SchedulerName).Limit("nvidia.com/gpu", "2").Request("nvidia.com/gpu", "1").Phase(corev1.PodPending).Obj()
	feed(s, gpuNode("n1", 8), pg, gangPod("ml", "gang", 0, 2), gangPod("ml", "gang", 1, 2), lone, bad)
	got := map[string]WaitView{}
	for _, w := range state(t, s).Waiting {
		got[w.Name] = w
	}
	if w := got["gang"]; w.Group != "pg/ml/gang" || w.Why != "gang 0/2 placeable" {
		t.Errorf("gang %+v", w)
	}
	if w := got["solo"]; w.Group != "pod/ml/solo" || w.Why != "0/1 nodes: GPU" {
		t.Errorf("solo %+v", w)
	}
	if w := got["bad"]; w.Group != "pod/ml/bad" || !strings.HasPrefix(w.Why, "held back by the scheduler: ") || len(got) != 3 {
		t.Errorf("bad %+v (of %d entries), want it held back with the scheduler's reason", w, len(got))
	}
}

func TestEventsStreamEveryChange(t *testing.T) {
	s := newTestServer(t)
	feed(s, gpuNode("n1", 8))
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()
	res, err := http.Get(srv.URL + "/api/events")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	r := bufio.NewReader(res.Body)
	next := func() *State {
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				t.Fatal(err)
			}
			if b, ok := strings.CutPrefix(line, "data: "); ok {
				var st State
				if err := json.Unmarshal([]byte(b), &st); err != nil {
					t.Fatal(err)
				}
				return &st
			}
		}
	}
	if st := next(); len(st.Nodes) != 1 {
		t.Fatalf("first state has %d nodes, want 1", len(st.Nodes))
	}
	feed(s, gpuNode("n2", 8))
	if st := next(); len(st.Nodes) != 2 {
		t.Fatalf("state after a node came has %d nodes, want 2", len(st.Nodes))
	}
	s.Feed(gpuNode("n1", 8), true)
	s.Rebuild()
	if st := next(); len(st.Nodes) != 1 || st.Nodes[0].Name != "n2" {
		t.Fatalf("state after n1 went: %+v", st.Nodes)
	}
}

func TestOnlyLoopbackAndSameOrigin(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:0", "192.0.2.1:0", "example.com:80", "nope", "127.0.0.1:99999"} {
		if l, err := Listen(addr); err == nil {
			l.Close()
			t.Errorf("Listen(%q) succeeded, want a refusal", addr)
		} else if !strings.Contains(err.Error(), "--address") {
			t.Errorf("Listen(%q): %v, want an error naming --address", addr, err)
		}
	}
	l, err := Listen("localhost:0")
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
	s := newTestServer(t)
	feed(s, gpuNode("n1", 8))
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()
	for _, tc := range []struct {
		header, value string
		want          int
	}{{"", "", 200}, {"Origin", "https://evil.example", 403}, {"Sec-Fetch-Site", "cross-site", 403}, {"Origin", srv.URL, 200}} {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+"/api/state", nil)
		if tc.header != "" {
			req.Header.Set(tc.header, tc.value)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != tc.want {
			t.Errorf("%s: %s gave %d, want %d", tc.header, tc.value, res.StatusCode, tc.want)
		}
	}
	res, err := http.Get(srv.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 200 || !strings.Contains(res.Header.Get("Content-Security-Policy"), "default-src 'self'") {
		t.Errorf("index: %d, CSP %q", res.StatusCode, res.Header.Get("Content-Security-Policy"))
	}
}

// An informer may transform an object twice, the second time already
// trimmed of its conditions and start time: what the page shows of them
// stays that of the first.
func TestTransformTwiceKeepsExtras(t *testing.T) {
	s := newTestServer(t)
	n := gpuNode("n1", 8)
	n.ResourceVersion = "7"
	p := running("ml", "job", "n1", 1, "0", time.Hour, 2*time.Hour)
	p.ResourceVersion = "9"
	for _, o := range []any{n, p} {
		once, err := s.cluster.transform(o)
		if err != nil {
			t.Fatal(err)
		}
		twice, err := s.cluster.transform(once)
		if err != nil {
			t.Fatal(err)
		}
		s.cluster.upsert(twice)
	}
	s.Rebuild()
	st := state(t, s)
	if len(st.Nodes) != 1 || !st.Nodes[0].Ready || st.Nodes[0].Problem != "" {
		t.Errorf("node %+v, want ready with no problem", st.Nodes)
	}
	if len(st.Running) != 1 || st.Running[0].EndsInSec < 3500 || st.Running[0].EndsInSec > 3600 {
		t.Errorf("running %+v, want the pod's deadline an hour away", st.Running)
	}
}
