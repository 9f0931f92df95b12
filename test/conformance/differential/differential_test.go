package differential

import (
	"context"
	"flag"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"
)

// cases is how many clusters TestDifferential draws; each has up to four
// pending pods judged on their own.
var cases = flag.Int("differential.cases", 1500, "clusters TestDifferential draws")

// seed is the first seed TestDifferential draws from; case i uses seed+i.
var seed = flag.Uint64("differential.seed", 1, "first seed of TestDifferential's clusters")

// TestDifferential draws clusters with the enabled features, seeded, and
// requires gpuplane-scheduler to find feasible, pod by pod, exactly the
// nodes kube-scheduler's own Filter plugins accept.
func TestDifferential(t *testing.T) {
	on, err := features()
	if err != nil {
		t.Fatal(err)
	}
	o := sharedOracle(t)
	t.Logf("kube-scheduler Filter plugins: %s", strings.Join(o.filterPlugins(), ", "))
	t.Logf("features drawn: %s", featureNames(sortedFeatures(on)))
	ctx := context.Background()
	pods := 0
	for i := range *cases {
		s := *seed + uint64(i)
		c := newGen(s, on).cluster()
		pods += len(c.pending)
		if msg := check(ctx, o, c); msg != "" {
			t.Fatalf("seed %d (rerun with -differential.seed=%d -differential.cases=1): %s", s, s, msg)
		}
	}
	t.Logf("%d clusters, %d pending pods: every pod's feasible nodes agree", *cases, pods)
}

// FuzzDifferential is TestDifferential with the fuzzer's seeds.
func FuzzDifferential(f *testing.F) {
	for s := range uint64(8) {
		f.Add(s)
	}
	on, err := features()
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, s uint64) {
		if msg := check(context.Background(), sharedOracle(t), newGen(s, on).cluster()); msg != "" {
			t.Fatalf("seed %d: %s", s, msg)
		}
	})
}

var (
	oracleOnce sync.Once
	oracleErr  error
	theOracle  *oracle
)

// sharedOracle builds kube-scheduler's framework once per process for the
// cases of only nodes and pods: its plugins keep no state between cycles
// but the snapshot each case sets. A case with objects besides (volumes,
// DRA) gets a framework of its own (differ).
func sharedOracle(t testing.TB) *oracle {
	oracleOnce.Do(func() { theOracle, _, oracleErr = newOracle(context.Background()) })
	if oracleErr != nil {
		t.Fatal(oracleErr)
	}
	return theOracle
}

// check compares both schedulers on c and returns "" when they agree on
// every pending pod, else a description of the smallest case it can find
// that still differs.
func check(ctx context.Context, o *oracle, c *cluster) string {
	d, err := differ(ctx, o, c)
	if err != nil {
		return err.Error()
	}
	if d == nil {
		return ""
	}
	small := shrink(ctx, o, c, d)
	d2, err := differ(ctx, o, small)
	if err != nil || d2 == nil {
		// Shrinking keeps only cases that differ; this cannot happen.
		return fmt.Sprintf("shrinking lost the difference (%v); the case as drawn:\n%s", err, describe(c, d))
	}
	return describe(small, d2)
}

// difference is one pending pod on which the two schedulers disagree.
type difference struct {
	pod        *corev1.Pod
	kube, ours verdicts
}

// differ runs both schedulers on c and returns the first pending pod they
// disagree on, or nil.
func differ(ctx context.Context, o *oracle, c *cluster) (*difference, error) {
	if len(c.objects) > 0 {
		own, stop, err := newOracle(ctx, c.objects...)
		if err != nil {
			return nil, fmt.Errorf("kube-scheduler: %w", err)
		}
		defer stop()
		o = own
	}
	kube, err := o.feasible(ctx, c.nodes, c.running, c.pending)
	if err != nil {
		return nil, fmt.Errorf("kube-scheduler: %w", err)
	}
	objs := make([]runtime.Object, 0, len(c.nodes)+len(c.running)+len(c.pending)+len(namespaces)+len(c.objects))
	objs = append(objs, namespaceObjects()...)
	objs = append(objs, c.objects...)
	names := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		objs = append(objs, n)
		names[i] = n.Name
	}
	keys := make([]string, len(c.pending))
	for _, p := range c.running {
		objs = append(objs, p)
	}
	for i, p := range c.pending {
		objs = append(objs, p)
		keys[i] = p.Namespace + "/" + p.Name
	}
	ours, err := gpuplaneFeasible(objs, names, keys)
	if err != nil {
		return nil, fmt.Errorf("gpuplane: %w", err)
	}
	for i, p := range c.pending {
		k, g := kube[keys[i]], ours[keys[i]]
		if !slices.Equal(k.accepted(), g.accepted()) {
			return &difference{pod: p, kube: k, ours: g}, nil
		}
	}
	return nil, nil
}

// describe renders a differing case: its objects as YAML, then for each
// node whether each scheduler takes the pod and, where not, why.
func describe(c *cluster, d *difference) string {
	var b strings.Builder
	fmt.Fprintf(&b, "pod %s/%s: kube-scheduler accepts %v, gpuplane %v\n", d.pod.Namespace, d.pod.Name, d.kube.accepted(), d.ours.accepted())
	for _, n := range c.nodes {
		k, g := d.kube[n.Name], d.ours[n.Name]
		mark := "  "
		if (k == "") != (g == "") {
			mark = "! "
		}
		fmt.Fprintf(&b, "%snode %s: kube-scheduler %s; gpuplane %s\n", mark, n.Name, verdict(k), verdict(g))
	}
	b.WriteString("the case (storage and DRA objects, nodes, running pods, the pending pod):\n")
	var objs []any
	for _, x := range c.objects {
		objs = append(objs, x)
	}
	for _, n := range c.nodes {
		objs = append(objs, n)
	}
	for _, p := range c.running {
		objs = append(objs, p)
	}
	objs = append(objs, d.pod)
	for _, o := range objs {
		b.WriteString("---\n")
		b.WriteString(toYAML(o))
	}
	return b.String()
}

func verdict(why string) string {
	if why == "" {
		return "accepts"
	}
	return "refuses (" + why + ")"
}

// toYAML renders an object without the fields a generated object leaves
// empty.
func toYAML(o any) string {
	out, err := yaml.Marshal(o)
	if err != nil {
		return fmt.Sprintf("%#v\n", o)
	}
	var b strings.Builder
	for _, line := range strings.SplitAfter(string(out), "\n") {
		switch strings.TrimSpace(line) {
		case "creationTimestamp: null", "resources: {}", "status: {}", "spec: {}", "daemonEndpoints:", "kubeletEndpoint:", "Port: 0", "nodeInfo:",
			"architecture: \"\"", "bootID: \"\"", "containerRuntimeVersion: \"\"", "kernelVersion: \"\"", "kubeProxyVersion: \"\"",
			"kubeletVersion: \"\"", "machineID: \"\"", "operatingSystem: \"\"", "osImage: \"\"", "systemUUID: \"\"":
			continue
		}
		b.WriteString(line)
	}
	return b.String()
}

func sortedFeatures(on map[Feature]bool) []Feature {
	var out []Feature
	for _, f := range allFeatures {
		if on[f] {
			out = append(out, f)
		}
	}
	return out
}
