package mig

import (
	"bytes"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/gpuplane/gpuplane/api/gpupod"
	"github.com/gpuplane/gpuplane/internal/gpu"
	"github.com/gpuplane/gpuplane/internal/mig"
	"github.com/gpuplane/gpuplane/internal/testutil/build"
)

func TestPodsByGPU(t *testing.T) {
	pod := func(name string, phase corev1.PodPhase) *build.PodBuilder { return build.Pod("ml", name).Phase(phase) }
	got := podsByGPU([]corev1.Pod{
		*pod("a", corev1.PodRunning).Annotation(gpupod.HeldAnnotation, "3").Obj(),
		*pod("b", corev1.PodRunning).Annotation(gpupod.HeldAnnotation, "3:m3,5").Annotation(gpupod.GPUsAnnotation, "0").Obj(), // the node's record wins
		*pod("c", corev1.PodPending).Annotation(gpupod.GPUsAnnotation, "5").Obj(),
		*pod("done", corev1.PodSucceeded).Annotation(gpupod.HeldAnnotation, "3").Obj(),
		*pod("bad", corev1.PodRunning).Annotation(gpupod.HeldAnnotation, "99").Obj(),
	}, 8)
	if strings.Join(got[3], " ") != "ml/a ml/b" || strings.Join(got[5], " ") != "ml/b ml/c" || len(got[0]) != 0 {
		t.Fatalf("got %v", got)
	}
}

func TestPrint(t *testing.T) {
	r := &Result{Node: "n1", Config: "c", Plan: &mig.Plan{Changes: []mig.Change{{Index: 1, UUID: "GPU-1", Entry: "mig-configs.c[0]",
		Instances: []mig.Instance{{Profile: "1g.10gb", Placement: gpu.Placement{Start: 0}}, {Profile: "1g.10gb", Placement: gpu.Placement{Start: 1}}}}}}, GPUs: []GPURow{
		{Index: 0, Name: "H100", From: "whole GPU", To: "whole GPU"},
		{Index: 1, Name: "H100", From: "whole GPU", To: "mig: 7x1g.10gb", Changes: true, Pods: []string{"ml/a"}},
	}}
	var b bytes.Buffer
	if err := Print(&b, r, false); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Config c on node n1: 1 of 2 GPUs change, 1 pod would be evicted.", "0    H100  whole GPU  (unchanged)", "1    H100  whole GPU  mig: 7x1g.10gb  ml/a"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, b.String())
		}
	}
	if strings.Contains(b.String(), "UUID") {
		t.Errorf("the table has wide's columns:\n%s", b.String())
	}
	b.Reset()
	if err := Print(&b, r, true); err != nil {
		t.Fatal(err)
	}
	if want := "ml/a            GPU-1  mig-configs.c[0]  1g.10gb@0,1g.10gb@1"; !strings.Contains(b.String(), want) {
		t.Errorf("wide output lacks %q:\n%s", want, b.String())
	}
}
