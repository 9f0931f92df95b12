package grouper

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/json"
	"sigs.k8s.io/yaml"

	"github.com/gpuplane/gpuplane/api/scheduling/v1alpha1"
)

func builtinRule(t *testing.T, gk schema.GroupKind) *Rule {
	t.Helper()
	rules, err := Builtin()
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rules {
		if r.Target == gk {
			return r
		}
	}
	t.Fatalf("no shipped rule for %v", gk)
	return nil
}

// decode reads YAML or JSON as the API server's clients do: whole numbers
// as int64.
func decode(y []byte) (map[string]any, error) {
	js, err := yaml.YAMLToJSON(y)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	err = json.Unmarshal(js, &m)
	return m, err
}

func obj(t *testing.T, y string) map[string]any {
	t.Helper()
	m, err := decode([]byte(y))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// The shipped rules give each kind's gang size from the workload as its
// operator's users write it.
func TestBuiltinRules(t *testing.T) {
	tests := []struct {
		name string
		gk   schema.GroupKind
		obj  string
		want int32
	}{
		{"indexed job, completions = parallelism", schema.GroupKind{Group: "batch", Kind: "Job"},
			`{spec: {completionMode: Indexed, completions: 4, parallelism: 4}}`, 4},
		{"indexed job with more completions than parallelism is a work queue", schema.GroupKind{Group: "batch", Kind: "Job"},
			`{spec: {completionMode: Indexed, completions: 100, parallelism: 4}}`, 1},
		{"non-indexed job", schema.GroupKind{Group: "batch", Kind: "Job"}, `{spec: {parallelism: 8}}`, 1},
		{"non-indexed job asking for a gang", schema.GroupKind{Group: "batch", Kind: "Job"},
			`{metadata: {annotations: {scheduling.gpuplane.io/gang: "true"}}, spec: {parallelism: 8}}`, 8},
		{"job without parallelism", schema.GroupKind{Group: "batch", Kind: "Job"}, `{spec: {}}`, 1},
		{"deployment", schema.GroupKind{Group: "apps", Kind: "Deployment"}, `{spec: {replicas: 10}}`, 1},
		{"jobset", schema.GroupKind{Group: "jobset.x-k8s.io", Kind: "JobSet"},
			`{spec: {replicatedJobs: [{name: leader, template: {spec: {parallelism: 1}}}, {name: workers, replicas: 2, template: {spec: {parallelism: 4}}}]}}`, 9},
		{"pytorchjob", schema.GroupKind{Group: "kubeflow.org", Kind: "PyTorchJob"},
			`{spec: {pytorchReplicaSpecs: {Master: {replicas: 1}, Worker: {replicas: 7}}}}`, 8},
		{"elastic pytorchjob gangs at its minimum", schema.GroupKind{Group: "kubeflow.org", Kind: "PyTorchJob"},
			`{spec: {elasticPolicy: {minReplicas: 2, maxReplicas: 8}, pytorchReplicaSpecs: {Worker: {replicas: 8}}}}`, 2},
		{"mpijob", schema.GroupKind{Group: "kubeflow.org", Kind: "MPIJob"},
			`{spec: {mpiReplicaSpecs: {Launcher: {replicas: 1}, Worker: {replicas: 4}}}}`, 5},
		{"raycluster with multi-host groups", schema.GroupKind{Group: "ray.io", Kind: "RayCluster"},
			`{spec: {headGroupSpec: {}, workerGroupSpecs: [{minReplicas: 2, numOfHosts: 4}, {minReplicas: 1}]}}`, 10},
		{"rayjob", schema.GroupKind{Group: "ray.io", Kind: "RayJob"},
			`{spec: {rayClusterSpec: {workerGroupSpecs: [{minReplicas: 3, maxReplicas: 10}]}}}`, 4},
		{"raycluster without workers", schema.GroupKind{Group: "ray.io", Kind: "RayCluster"}, `{spec: {headGroupSpec: {}}}`, 1},
		{"workload API gang", schema.GroupKind{Group: "scheduling.k8s.io", Kind: "PodGroup"}, `{spec: {schedulingPolicy: {gang: {minCount: 6}}}}`, 6},
		{"workload API basic", schema.GroupKind{Group: "scheduling.k8s.io", Kind: "PodGroup"}, `{spec: {schedulingPolicy: {basic: {}}}}`, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d, err := builtinRule(t, tc.gk).Eval(obj(t, tc.obj), nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			if d.MinMember != tc.want {
				t.Errorf("minMember %d, want %d", d.MinMember, tc.want)
			}
		})
	}
}

// The queue comes from the workload's own labels in any dialect, unless the
// rule says otherwise.
func TestRuleQueue(t *testing.T) {
	r := builtinRule(t, schema.GroupKind{Group: "kubeflow.org", Kind: "PyTorchJob"})
	d, err := r.Eval(obj(t, `{spec: {pytorchReplicaSpecs: {Worker: {replicas: 2}}}}`), map[string]string{v1alpha1.KueueQueueLabel: "team-a"}, nil)
	if err != nil || d.Queue != "team-a" || !strings.Contains(d.Explain, "label "+v1alpha1.KueueQueueLabel) {
		t.Errorf("= %+v, %v; want queue team-a explained by Kueue's label", d, err)
	}
	_, err = r.Eval(obj(t, `{spec: {pytorchReplicaSpecs: {Worker: {replicas: 2}}}}`), map[string]string{v1alpha1.KueueQueueLabel: "a", v1alpha1.QueueLabel: "b"}, nil)
	if err == nil || !strings.Contains(err.Error(), "names queue") {
		t.Errorf("conflicting workload labels: %v, want a conflict error", err)
	}
	custom, err := Compile("mine", v1alpha1.GroupingRuleSpec{Target: v1alpha1.GroupKind{Group: "example.com", Kind: "Trainer"},
		MinMember: "object.spec.workers", Queue: "'team-' + object.metadata.namespace"})
	if err != nil {
		t.Fatal(err)
	}
	d, err = custom.Eval(obj(t, `{metadata: {namespace: ml}, spec: {workers: 3}}`), nil, nil)
	if err != nil || d.Queue != "team-ml" || d.MinMember != 3 {
		t.Errorf("= %+v, %v; want 3 in team-ml", d, err)
	}
}

// Bad rules and bad workloads are errors that name the field, never a
// silent minMember of 1.
func TestRuleErrors(t *testing.T) {
	compile := []struct {
		name string
		spec v1alpha1.GroupingRuleSpec
		want string
	}{
		{"no kind", v1alpha1.GroupingRuleSpec{MinMember: "1"}, "spec.target.kind: required"},
		{"bad group", v1alpha1.GroupingRuleSpec{Target: v1alpha1.GroupKind{Group: "Not A Group", Kind: "X"}, MinMember: "1"}, "spec.target.group"},
		{"no minMember", v1alpha1.GroupingRuleSpec{Target: v1alpha1.GroupKind{Kind: "X"}}, "spec.minMember: required"},
		{"syntax", v1alpha1.GroupingRuleSpec{Target: v1alpha1.GroupKind{Kind: "X"}, MinMember: "object.spec.("}, "spec.minMember: does not compile"},
		{"wrong type", v1alpha1.GroupingRuleSpec{Target: v1alpha1.GroupKind{Kind: "X"}, MinMember: "'eight'"}, "spec.minMember: gives a string, want a int"},
		{"queue not a string", v1alpha1.GroupingRuleSpec{Target: v1alpha1.GroupKind{Kind: "X"}, MinMember: "1", Queue: "1 + 1"}, "spec.queue: gives a int"},
	}
	for _, tc := range compile {
		if _, err := Compile("r", tc.spec); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
	eval := []struct {
		name, expr, obj, want string
	}{
		{"negative", "object.spec.count", `{spec: {count: -3}}`, "gave -3, want 1 to 100000"},
		{"too many", "object.spec.count", `{spec: {count: 200000}}`, "gave 200000"},
		{"missing field", "object.spec.workers", `{spec: {}}`, "no such key: workers"},
		{"not an int", "object.spec.count", `{spec: {count: "8"}}`, "want an int"},
		{"sum of strings", "object.spec.l.sum()", `{spec: {l: [1, "2"]}}`, "element 1 is not an int"},
		{"too costly", "object.spec.l.map(a, object.spec.l.map(b, object.spec.l.map(c, a * b * c).sum()).sum()).sum()", `{spec: {l: [` + strings.Repeat("1,", 299) + `1]}}`, "cost"},
	}
	for _, tc := range eval {
		r, err := Compile("r", v1alpha1.GroupingRuleSpec{Target: v1alpha1.GroupKind{Kind: "X"}, MinMember: tc.expr})
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		_, err = r.Eval(obj(t, tc.obj), nil, nil)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "spec.minMember") {
			t.Errorf("%s: %v, want an error naming spec.minMember with %q", tc.name, err, tc.want)
		}
	}
}

// FuzzRuleEval feeds the shipped rules arbitrary workloads: an error or a
// bounded minMember, never a panic.
func FuzzRuleEval(f *testing.F) {
	f.Add(`{"spec":{"completionMode":"Indexed","completions":4,"parallelism":4}}`)
	f.Add(`{"spec":{"replicatedJobs":[{"replicas":2,"template":{"spec":{"parallelism":9223372036854775807}}}]}}`)
	f.Add(`{"spec":{"pytorchReplicaSpecs":{"Worker":{"replicas":-1}}}}`)
	f.Add(`{"spec":{"startupPolicy":"LeaderReady","leaderWorkerTemplate":{"size":1}}}`)
	f.Add(`{"metadata":{"annotations":{"leaderworkerset.sigs.k8s.io/exclusive-topology":"rack"}},"spec":{"leaderWorkerTemplate":{"size":0}}}`)
	f.Add(`{"spec":{"trainer":{"numNodes":-4}}}`)
	rules, err := Builtin()
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, js string) {
		m, err := decode([]byte(js))
		if err != nil || m == nil {
			return
		}
		for _, r := range rules {
			d, err := r.Eval(m, nil, nil)
			if err == nil && (d.MinMember < 1 || d.MinMember > MaxMinMember) {
				t.Fatalf("%s: minMember %d out of bounds", r.Name, d.MinMember)
			}
			// A splitting rule's key, from pod labels the workload's
			// own may not match, and the group it sizes.
			key, err := r.GroupKey(m, PodMeta{Labels: map[string]string{"leaderworkerset.sigs.k8s.io/group-index": "0",
				"leaderworkerset.sigs.k8s.io/worker-index": "1", "jobset.sigs.k8s.io/replicatedjob-name": "node"}})
			if err != nil {
				continue
			}
			if d, err := r.EvalGroup(m, key, nil, nil); err == nil && (d.MinMember < 1 || d.MinMember > MaxMinMember) {
				t.Fatalf("%s: group %q: minMember %d out of bounds", r.Name, key, d.MinMember)
			}
		}
	})
}

// The GroupingRules in examples/ compile and give what their comments say.
func TestExampleRules(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "..", "examples", "workloads", "02-grouping-rule.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var o v1alpha1.GroupingRule
	if err := yaml.UnmarshalStrict(data, &o); err != nil {
		t.Fatal(err)
	}
	r, err := Compile(o.Name, o.Spec)
	if err != nil {
		t.Fatal(err)
	}
	for y, want := range map[string]int32{
		`{spec: {minAvailable: 3, queue: research, tasks: [{replicas: 4}]}}`:      3,
		`{spec: {tasks: [{replicas: 1, name: ps}, {replicas: 4, name: worker}]}}`: 5,
	} {
		d, err := r.Eval(obj(t, y), nil, nil)
		if err != nil || d.MinMember != want {
			t.Errorf("%s: %+v, %v; want minMember %d", y, d, err, want)
		}
	}
}

// A rule with spec.groupBy splits a workload by its pods' keys, and sizes
// each key's group: a LeaderWorkerSet per replica, a TrainJob's trainer
// apart from its initializers.
func TestGroupBy(t *testing.T) {
	lws := builtinRule(t, schema.GroupKind{Group: "leaderworkerset.x-k8s.io", Kind: "LeaderWorkerSet"})
	train := builtinRule(t, schema.GroupKind{Group: "trainer.kubeflow.org", Kind: "TrainJob"})
	const (
		gi = "leaderworkerset.sigs.k8s.io/group-index"
		wi = "leaderworkerset.sigs.k8s.io/worker-index"
		rj = "jobset.sigs.k8s.io/replicatedjob-name"
	)
	tests := []struct {
		name      string
		rule      *Rule
		obj       string
		labels    map[string]string
		wantKey   string
		wantMin   int32
		wantPrioC string
	}{
		{"lws leader", lws, `{spec: {replicas: 2, leaderWorkerTemplate: {size: 4}}}`, map[string]string{gi: "1", wi: "0"}, "1", 4, ""},
		{"lws worker joins its leader", lws, `{spec: {replicas: 2, leaderWorkerTemplate: {size: 4, workerTemplate: {spec: {priorityClassName: high}}}}}`,
			map[string]string{gi: "1", wi: "3"}, "1", 4, "high"},
		{"lws without size", lws, `{spec: {leaderWorkerTemplate: {}}}`, map[string]string{gi: "0"}, "0", 1, ""},
		{"lws LeaderReady leader goes alone", lws, `{spec: {startupPolicy: LeaderReady, leaderWorkerTemplate: {size: 4}}}`,
			map[string]string{gi: "0", wi: "0"}, "0", 1, ""},
		{"lws LeaderReady workers gang without their leader", lws, `{spec: {startupPolicy: LeaderReady, leaderWorkerTemplate: {size: 4}}}`,
			map[string]string{gi: "0", wi: "2"}, "0-workers", 3, ""},
		{"lws exclusive placement: workers gang without their leader", lws,
			`{metadata: {annotations: {leaderworkerset.sigs.k8s.io/exclusive-topology: rack}}, spec: {leaderWorkerTemplate: {size: 4}}}`,
			map[string]string{gi: "0", wi: "1"}, "0-workers", 3, ""},
		{"lws exclusive placement: leader alone", lws,
			`{metadata: {annotations: {leaderworkerset.sigs.k8s.io/exclusive-topology: rack}}, spec: {leaderWorkerTemplate: {size: 4}}}`,
			map[string]string{gi: "0", wi: "0"}, "0", 1, ""},
		{"trainjob node", train, `{spec: {trainer: {numNodes: 4}}}`, map[string]string{rj: "node"}, "trainer", 4, ""},
		{"trainjob mpi launcher joins the nodes", train, `{spec: {trainer: {numNodes: 4}}}`, map[string]string{rj: "launcher"}, "trainer", 4, ""},
		{"trainjob initializer alone", train, `{spec: {trainer: {numNodes: 4}}}`, map[string]string{rj: "model-initializer"}, "model-initializer", 1, ""},
		{"trainjob without numNodes", train, `{spec: {}}`, map[string]string{rj: "node"}, "trainer", 1, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := obj(t, tc.obj)
			key, err := tc.rule.GroupKey(o, PodMeta{Name: "p", Namespace: "ml", Labels: tc.labels})
			if err != nil || key != tc.wantKey {
				t.Fatalf("key %q, %v; want %q", key, err, tc.wantKey)
			}
			d, err := tc.rule.EvalGroup(o, key, nil, nil)
			if err != nil || d.MinMember != tc.wantMin || d.PriorityClassName != tc.wantPrioC {
				t.Fatalf("= %+v, %v; want minMember %d, priority class %q", d, err, tc.wantMin, tc.wantPrioC)
			}
			if !strings.Contains(d.Explain, `group "`+key+`"`) {
				t.Errorf("explain %q does not name the group", d.Explain)
			}
		})
	}
	if key, err := builtinRule(t, schema.GroupKind{Group: "batch", Kind: "Job"}).GroupKey(obj(t, `{}`), PodMeta{}); key != "" || err != nil {
		t.Errorf("a rule without groupBy gave key %q, %v; want the workload's one group", key, err)
	}
}

// spec.groupBy's mistakes are errors naming it: at compile time on the
// rule's Valid condition, at evaluation on the pod.
func TestGroupByErrors(t *testing.T) {
	spec := func(groupBy, minMember string) v1alpha1.GroupingRuleSpec {
		return v1alpha1.GroupingRuleSpec{Target: v1alpha1.GroupKind{Kind: "X"}, GroupBy: groupBy, MinMember: minMember}
	}
	for name, tc := range map[string]struct {
		spec v1alpha1.GroupingRuleSpec
		want string
	}{
		"not a string":            {spec("1", "1"), "spec.groupBy: gives a int, want a string"},
		"syntax":                  {spec("pod.metadata.(", "1"), "spec.groupBy: does not compile"},
		"minMember reads the pod": {spec("'a'", "size(pod.metadata.name)"), "spec.minMember: reads pod"},
		"queue reads the pod": {v1alpha1.GroupingRuleSpec{Target: v1alpha1.GroupKind{Kind: "X"}, MinMember: "1", Queue: "pod.metadata.name"},
			"spec.queue: reads pod"},
		"too long": {spec(strings.Repeat(" ", 4097), "1"), "spec.groupBy: 4097 bytes"},
	} {
		if _, err := Compile("r", tc.spec); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", name, err, tc.want)
		}
	}
	for name, tc := range map[string]struct {
		groupBy string
		labels  map[string]string
		want    string
	}{
		"missing label": {"pod.metadata.labels['k']", nil, "no such key: k"},
		"not a label":   {"pod.metadata.labels['k']", map[string]string{"k": "Not_A_Label"}, `gave "Not_A_Label", want "" or a DNS label`},
		"too long":      {"pod.metadata.labels['k']", map[string]string{"k": strings.Repeat("a", 64)}, "want \"\" or a DNS label"},
	} {
		r, err := Compile("r", spec(tc.groupBy, "2"))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		_, err = r.GroupKey(obj(t, `{}`), PodMeta{Labels: tc.labels})
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "spec.groupBy") {
			t.Errorf("%s: %v, want an error naming spec.groupBy with %q", name, err, tc.want)
		}
	}
	r, err := Compile("r", spec("pod.metadata.name", "group == 'a' ? 2 : 1"))
	if err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]int32{"a": 2, "b": 1} {
		if d, err := r.EvalGroup(obj(t, `{}`), key, nil, nil); err != nil || d.MinMember != want {
			t.Errorf("group %s: %+v, %v; want minMember %d", key, d, err, want)
		}
	}
}
