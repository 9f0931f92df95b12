package doctor

import (
	"bytes"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/gpuplane/gpuplane/api/reasons"
	"github.com/gpuplane/gpuplane/api/scheduling/v1alpha1"
)

// TestPrint checks the table: one line a check, then the fixes of the
// checks that did not pass.
func TestPrint(t *testing.T) {
	r := &Report{Kind: "Pod", Name: "ml/trainer-0", Summary: "not placed"}
	r.add("GPU request", OK, "nvidia.com/gpu: 8", "")
	r.addReason("DoesNotFit", "placement", Fail, "not placed: DoesNotFit: 0/4 nodes available: 4 insufficient nvidia.com/gpu", fixFor("DoesNotFit", nil))
	var b bytes.Buffer
	if err := Print(&b, r, false); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"POD ml/trainer-0: not placed",
		"CHECK        RESULT  DETAIL",
		"placement    fail    not placed: DoesNotFit",
		"TO FIX\n  placement: gpuplane status -o wide",
		// Each reason gpuplane wrote links its troubleshooting entry,
		// under the fix or alone.
		"\n    see " + reasons.DocsURL + "#doesnotfit\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "GPU request:") {
		t.Errorf("a passing check has a fix line:\n%s", out)
	}
	if !r.Failed() {
		t.Error("Failed() = false with a failed check")
	}
}

// TestPrintWide puts each fix in a FIX column instead of a list.
func TestPrintWide(t *testing.T) {
	r := &Report{Kind: "Node", Name: "gpu-1", Summary: "offers no GPU to new pods"}
	r.add("ready", OK, "Ready", "")
	r.add("cordon", Fail, "cordoned", "kubectl uncordon gpu-1")
	var b bytes.Buffer
	if err := Print(&b, r, true); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"CHECK   RESULT  DETAIL    FIX", "ready   ok      Ready     -", "cordon  fail    cordoned  kubectl uncordon gpu-1"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "TO FIX") {
		t.Errorf("wide output also lists the fixes:\n%s", out)
	}
}

// TestPrintLinksReasons checks that a check reporting a reason gpuplane
// writes links its troubleshooting entry, even without a fix, and that one
// reporting another component's reason does not.
func TestPrintLinksReasons(t *testing.T) {
	r := &Report{Kind: "Pod", Name: "ml/notebook", Summary: "Running on n1"}
	r.addReason("GPUMemoryOverLimit", "event GPUMemoryOverLimit", Warn, "uses 30 GiB of its 20 GiB", "")
	r.addReason("BackOff", "event BackOff", Warn, "the kubelet's", "")
	var b bytes.Buffer
	if err := Print(&b, r, false); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	if want := "TO FIX\n  event GPUMemoryOverLimit: see " + reasons.DocsURL + "#gpumemoryoverlimit\n"; !strings.Contains(out, want) {
		t.Errorf("output lacks %q:\n%s", want, out)
	}
	if strings.Contains(out, "event BackOff:") {
		t.Errorf("a reason gpuplane does not write links the docs:\n%s", out)
	}
}

func TestSameGPUs(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want bool
	}{
		{"0,1", "0,1", true},
		{"5:500", "5:250", true}, // a share of GPU 5 either way
		{"5:500", "6:250", false},
		{"0,1", "0,2", false},
	} {
		if got := sameGPUs(tc.a, tc.b); got != tc.want {
			t.Errorf("sameGPUs(%q, %q) = %v, want %v", tc.a, tc.b, got, tc.want)
		}
	}
}

// A pod held for its topology is pointed at the Topologies and the field.
func TestFixForTopology(t *testing.T) {
	for _, reason := range []string{"InvalidTopology", "TopologyMismatch"} {
		if fix := fixFor(reason, nil); !strings.Contains(fix, "kubectl get topologies") || !strings.Contains(fix, "spec.topology") {
			t.Errorf("%s: fix %q", reason, fix)
		}
	}
}

// A waiting pod says whether autoscalers would add nodes for it.
func TestGateNote(t *testing.T) {
	gated := func(names ...string) *corev1.Pod {
		p := &corev1.Pod{}
		for _, n := range names {
			p.Spec.SchedulingGates = append(p.Spec.SchedulingGates, corev1.PodSchedulingGate{Name: n})
		}
		return p
	}
	tests := []struct {
		name   string
		pod    *corev1.Pod
		reason string
		want   string
	}{
		{"gpuplane's gate alone", gated(v1alpha1.SchedulingGate), "QueueLimit", "autoscalers add no node for it"},
		{"another controller's gate too", gated(v1alpha1.SchedulingGate, "example.com/wait"), "QueueLimit", "scheduling gate example.com/wait, which another controller"},
		{"released for capacity", gated(), corev1.PodReasonUnschedulable, "an autoscaler (Karpenter, Cluster Autoscaler) may add them"},
		{"released, then held by its quota", gated(), "QueueLimit", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := gateNote(tc.pod, tc.reason)
			if tc.want == "" && got != "" || !strings.Contains(got, tc.want) {
				t.Errorf("gateNote = %q, want %q", got, tc.want)
			}
		})
	}
}
