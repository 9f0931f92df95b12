package mig

import (
	"bytes"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpuplane/gpuplane/api/gpupod"
	"github.com/gpuplane/gpuplane/internal/mig"
)

func pod(name, held, chosen string, phase corev1.PodPhase) corev1.Pod {
	p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: name, Annotations: map[string]string{}}, Status: corev1.PodStatus{Phase: phase}}
	if held != "" {
		p.Annotations[gpupod.HeldAnnotation] = held
	}
	if chosen != "" {
		p.Annotations[gpupod.GPUsAnnotation] = chosen
	}
	return p
}

func TestPodsByGPU(t *testing.T) {
	got := podsByGPU([]corev1.Pod{
		pod("a", "3", "", corev1.PodRunning),
		pod("b", "3:m3,5", "0", corev1.PodRunning), // the node's record wins
		pod("c", "", "5", corev1.PodPending),
		pod("done", "3", "", corev1.PodSucceeded),
		pod("bad", "99", "", corev1.PodRunning),
	}, 8)
	if strings.Join(got[3], " ") != "ml/a ml/b" || strings.Join(got[5], " ") != "ml/b ml/c" || len(got[0]) != 0 {
		t.Fatalf("got %v", got)
	}
}

func TestPrint(t *testing.T) {
	r := &Result{Node: "n1", Config: "c", Plan: &mig.Plan{Changes: []mig.Change{{Index: 1}}}, GPUs: []GPURow{
		{Index: 0, Name: "H100", From: "whole GPU", To: "whole GPU"},
		{Index: 1, Name: "H100", From: "whole GPU", To: "mig: 7x1g.10gb", Changes: true, Pods: []string{"ml/a"}},
	}}
	var b bytes.Buffer
	if err := Print(&b, r); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Config c on node n1: 1 of 2 GPUs change, 1 pod would be evicted.", "0    H100  whole GPU  (unchanged)", "1    H100  whole GPU  mig: 7x1g.10gb  ml/a"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, b.String())
		}
	}
}
