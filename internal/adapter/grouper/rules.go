package grouper

import (
	"errors"
	"fmt"
	"strings"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/common/types/traits"
	"github.com/google/cel-go/ext"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/gpuplane/gpuplane/api/scheduling/v1alpha1"
)

// Bounds on what a rule may cost: the expressions come from cluster
// objects anyone with a GroupingRule's RBAC may write, and the workloads
// they read from any namespace.
const (
	// MaxMinMember matches PodGroup spec.minMember's bound.
	MaxMinMember = 100000
	// evalCostLimit is CEL's runtime cost budget per expression: enough to
	// sum a few thousand replica specs, far from a denial of service.
	evalCostLimit = 1_000_000
)

// Rule is a compiled GroupingRule: how a PodGroup is made for one kind of
// workload.
type Rule struct {
	// Name is the GroupingRule's name, or "builtin/<kind>" for a shipped
	// rule.
	Name   string
	Target schema.GroupKind
	Spec   v1alpha1.GroupingRuleSpec

	groupBy, minMember, queue, priority cel.Program
}

// Derived is what a rule makes of one workload.
type Derived struct {
	MinMember         int32
	Queue             string
	PriorityClassName string
	// MinResources is what the group's queue must admit before its pods
	// are considered (PodGroup spec.minResources); nil for none.
	MinResources corev1.ResourceList
	// Topology is the group's topology constraint (PodGroup
	// spec.topology); nil for none.
	Topology *v1alpha1.TopologyConstraint
	// Explain says where each value came from, for the PodGroup's
	// derived-from annotation and `gpuplane status`.
	Explain string
}

// env is the CEL environment rules compile in: `object` is the workload,
// `pod` the pending pod's metadata (spec.groupBy only), `group` the key
// spec.groupBy gave ("" without it), with optional field access
// (object.spec.?replicas.orValue(1)), the string and list extensions,
// two-variable comprehensions and sum().
var env = func() *cel.Env {
	e, err := cel.NewEnv(
		cel.Variable("object", cel.DynType),
		cel.Variable("pod", cel.DynType),
		cel.Variable("group", cel.StringType),
		cel.OptionalTypes(),
		ext.Strings(),
		ext.Lists(),
		ext.TwoVarComprehensions(),
		ext.Bindings(),
		cel.Function("sum",
			cel.MemberOverload("list_sum", []*cel.Type{cel.ListType(cel.DynType)}, cel.IntType, cel.UnaryBinding(sumInts))),
	)
	if err != nil {
		panic(fmt.Sprintf("grouper: building the CEL environment: %v", err))
	}
	return e
}()

// sumInts adds a list of ints; anything else in it is an error naming the
// element.
func sumInts(v ref.Val) ref.Val {
	l, ok := v.(traits.Lister)
	if !ok {
		return types.NewErr("sum() of a %s", v.Type())
	}
	var total int64
	it := l.Iterator()
	for i := 0; it.HasNext() == types.True; i++ {
		n, ok := it.Next().(types.Int)
		if !ok {
			return types.NewErr("sum(): element %d is not an int", i)
		}
		if (n > 0 && total > (1<<62)) || (n < 0 && total < -(1<<62)) {
			return types.NewErr("sum(): overflow")
		}
		total += int64(n)
	}
	return types.Int(total)
}

// Compile checks a rule's target and compiles its expressions. Its errors
// name the field and what to change.
func Compile(name string, spec v1alpha1.GroupingRuleSpec) (*Rule, error) {
	r := &Rule{Name: name, Target: schema.GroupKind{Group: spec.Target.Group, Kind: spec.Target.Kind}, Spec: spec}
	if spec.Target.Kind == "" {
		return nil, errors.New("spec.target.kind: required (the workload's kind, as in its ownerReferences: Job, PyTorchJob, ...)")
	}
	if spec.Target.Group != "" {
		if errs := validation.IsDNS1123Subdomain(spec.Target.Group); len(errs) > 0 {
			return nil, fmt.Errorf("spec.target.group: %q is not an API group: %s", spec.Target.Group, strings.Join(errs, "; "))
		}
	}
	var err error
	if spec.GroupBy != "" {
		if r.groupBy, err = compileExpr("spec.groupBy", spec.GroupBy, cel.StringType); err != nil {
			return nil, err
		}
	}
	if spec.MinMember == "" {
		return nil, errors.New("spec.minMember: required (a CEL expression giving an int, such as object.spec.parallelism)")
	}
	if r.minMember, err = compileExpr("spec.minMember", spec.MinMember, cel.IntType); err != nil {
		return nil, err
	}
	if spec.Queue != "" {
		if r.queue, err = compileExpr("spec.queue", spec.Queue, cel.StringType); err != nil {
			return nil, err
		}
	}
	if spec.PriorityClassName != "" {
		if r.priority, err = compileExpr("spec.priorityClassName", spec.PriorityClassName, cel.StringType); err != nil {
			return nil, err
		}
	}
	// Only spec.groupBy sees the pod: a group's size, queue and priority
	// are the group's, the same whichever of its pods asks.
	for field, src := range map[string]string{"spec.minMember": spec.MinMember, "spec.queue": spec.Queue, "spec.priorityClassName": spec.PriorityClassName} {
		if src == "" {
			continue
		}
		if ast, iss := env.Compile(src); iss.Err() == nil && referencesPod(ast) {
			return nil, fmt.Errorf("%s: reads pod, which only spec.groupBy may (use group, the key spec.groupBy gave)", field)
		}
	}
	return r, nil
}

// referencesPod reports whether a checked expression reads the variable
// pod.
func referencesPod(ast *cel.Ast) bool {
	checked, err := cel.AstToCheckedExpr(ast)
	if err != nil {
		return false
	}
	for _, ref := range checked.GetReferenceMap() {
		if ref.GetName() == "pod" {
			return true
		}
	}
	return false
}

// Splits reports whether the rule splits a workload into several groups
// (spec.groupBy).
func (r *Rule) Splits() bool { return r.groupBy != nil }

// PodMeta is what spec.groupBy sees of a pod: its identity and metadata,
// never its spec or status (a group must not change as the pod runs).
type PodMeta struct {
	Name, Namespace     string
	Labels, Annotations map[string]string
}

// GroupKey works out the key of the group a pod of the workload obj joins:
// "" for the workload's one group (always, for a rule without
// spec.groupBy), else a DNS label.
func (r *Rule) GroupKey(obj map[string]any, pod PodMeta) (string, error) {
	if r.groupBy == nil {
		return "", nil
	}
	labels, annotations := pod.Labels, pod.Annotations
	if labels == nil {
		labels = map[string]string{}
	}
	if annotations == nil {
		annotations = map[string]string{}
	}
	in := map[string]any{"object": obj, "group": "", "pod": map[string]any{"metadata": map[string]any{
		"name": pod.Name, "namespace": pod.Namespace, "labels": labels, "annotations": annotations}}}
	v, err := evalExpr(r.groupBy, in)
	if err != nil {
		return "", fmt.Errorf("GroupingRule %s: spec.groupBy: %w", r.Name, err)
	}
	key, ok := v.(string)
	if !ok {
		return "", fmt.Errorf("GroupingRule %s: spec.groupBy: gave %T, want a string", r.Name, v)
	}
	if key != "" {
		if errs := validation.IsDNS1123Label(key); len(errs) > 0 {
			return "", fmt.Errorf("GroupingRule %s: spec.groupBy: gave %q, want \"\" or a DNS label: %s", r.Name, truncate(key), strings.Join(errs, "; "))
		}
	}
	return key, nil
}

func compileExpr(field, src string, want *cel.Type) (cel.Program, error) {
	if len(src) > 4096 {
		return nil, fmt.Errorf("%s: %d bytes, at most 4096", field, len(src))
	}
	ast, iss := env.Compile(src)
	if iss.Err() != nil {
		return nil, fmt.Errorf("%s: does not compile: %w", field, iss.Err())
	}
	if t := ast.OutputType(); !t.IsExactType(want) && !t.IsExactType(cel.DynType) {
		return nil, fmt.Errorf("%s: gives a %s, want a %s", field, t, want)
	}
	prg, err := env.Program(ast, cel.CostLimit(evalCostLimit), cel.EvalOptions(cel.OptOptimize))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", field, err)
	}
	return prg, nil
}

// Eval works out a workload's group. obj is the workload as unstructured
// JSON. The queue, when the rule gives no expression for it, is the one the
// workload's own labels and annotations name (v1alpha1.QueueKeys).
func (r *Rule) Eval(obj map[string]any, labels, annotations map[string]string) (Derived, error) {
	return r.EvalGroup(obj, "", labels, annotations)
}

// EvalGroup works out the group of key group (GroupKey's) of a workload.
func (r *Rule) EvalGroup(obj map[string]any, group string, labels, annotations map[string]string) (Derived, error) {
	in := map[string]any{"object": obj, "group": group}
	var d Derived
	v, err := evalExpr(r.minMember, in)
	if err != nil {
		return d, fmt.Errorf("GroupingRule %s: spec.minMember: %w", r.Name, err)
	}
	n, ok := v.(int64)
	switch {
	case !ok:
		return d, fmt.Errorf("GroupingRule %s: spec.minMember: gave %T, want an int", r.Name, v)
	case n < 1 || n > MaxMinMember:
		return d, fmt.Errorf("GroupingRule %s: spec.minMember: gave %d, want 1 to %d", r.Name, n, MaxMinMember)
	}
	d.MinMember = int32(n)
	explain := []string{fmt.Sprintf("minMember %d from %s spec.minMember", n, r.Name)}
	if r.groupBy != nil {
		explain = append([]string{fmt.Sprintf("group %q from %s spec.groupBy", group, r.Name)}, explain...)
	}
	if r.queue != nil {
		s, err := evalString(r.queue, in, "spec.queue")
		if err != nil {
			return d, fmt.Errorf("GroupingRule %s: %w", r.Name, err)
		}
		d.Queue = s
		if s != "" {
			explain = append(explain, fmt.Sprintf("queue %s from %s spec.queue", s, r.Name))
		}
	} else {
		q, err := v1alpha1.PodQueueName(labels, annotations)
		if err != nil {
			return d, fmt.Errorf("the workload's %w", err)
		}
		d.Queue = q.Value
		if q.Value != "" {
			explain = append(explain, fmt.Sprintf("queue %s from the workload's %s", q.Value, q.From))
		}
	}
	if r.priority != nil {
		s, err := evalString(r.priority, in, "spec.priorityClassName")
		if err != nil {
			return d, fmt.Errorf("GroupingRule %s: %w", r.Name, err)
		}
		d.PriorityClassName = s
	}
	d.Explain = strings.Join(explain, "; ")
	return d, nil
}

func evalExpr(p cel.Program, in map[string]any) (any, error) {
	out, _, err := p.Eval(in)
	if err != nil {
		return nil, err
	}
	return out.Value(), nil
}

func evalString(p cel.Program, in map[string]any, field string) (string, error) {
	v, err := evalExpr(p, in)
	if err != nil {
		return "", fmt.Errorf("%s: %w", field, err)
	}
	s, ok := v.(string)
	if !ok {
		return "", fmt.Errorf("%s: gave %T, want a string", field, v)
	}
	if s != "" {
		if errs := validation.IsDNS1123Subdomain(s); len(errs) > 0 {
			return "", fmt.Errorf("%s: gave %q, not a valid name: %s", field, truncate(s), strings.Join(errs, "; "))
		}
	}
	return s, nil
}

func truncate(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}
