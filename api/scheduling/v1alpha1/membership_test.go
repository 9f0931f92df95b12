package v1alpha1

import (
	"errors"
	"strings"
	"testing"
)

func TestPodQueueNamePrecedence(t *testing.T) {
	tests := []struct {
		name        string
		labels      map[string]string
		annotations map[string]string
		want        string
		from        string
		err         string
	}{
		{name: "none"},
		{name: "gpuplane", labels: map[string]string{QueueLabel: "a"}, want: "a", from: "label " + QueueLabel},
		{name: "kueue", labels: map[string]string{KueueQueueLabel: "b"}, want: "b", from: "label " + KueueQueueLabel},
		{name: "kai", labels: map[string]string{KAIQueueLabel: "c"}, want: "c", from: "label " + KAIQueueLabel},
		{name: "volcano", annotations: map[string]string{VolcanoQueueAnnotation: "d"}, want: "d", from: "annotation " + VolcanoQueueAnnotation},
		{name: "agreeing dialects", labels: map[string]string{QueueLabel: "a", KAIQueueLabel: "a"}, annotations: map[string]string{VolcanoQueueAnnotation: "a"}, want: "a", from: "label " + QueueLabel},
		{name: "conflict", labels: map[string]string{KueueQueueLabel: "a", KAIQueueLabel: "b"}, err: `label kueue.x-k8s.io/queue-name names queue "a" but label kai.scheduler/queue names "b"`},
		{name: "not a name", annotations: map[string]string{VolcanoQueueAnnotation: strings.Repeat("x", 300)}, err: "is not a valid queue name"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := PodQueueName(tc.labels, tc.annotations)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want %q", err, tc.err)
				}
				if len(err.Error()) > 400 {
					t.Errorf("error of %d bytes: a hostile annotation must not be echoed whole", len(err.Error()))
				}
				return
			}
			if err != nil || got.Value != tc.want || (tc.from != "" && got.From.String() != tc.from) {
				t.Errorf("= %q from %q, %v; want %q from %q", got.Value, got.From, err, tc.want, tc.from)
			}
		})
	}
}

func TestPodGroupNamePrecedence(t *testing.T) {
	got, err := PodGroupName(map[string]string{SchedulerPluginsPodGroupLabel: "g"}, map[string]string{VolcanoGroupAnnotation: "g"})
	if err != nil || got.Value != "g" || got.From.Name != SchedulerPluginsPodGroupLabel {
		t.Errorf("= %+v, %v; want g from scheduler-plugins' label", got, err)
	}
	_, err = PodGroupName(map[string]string{PodGroupLabel: "g"}, map[string]string{VolcanoGroupAnnotation: "h"})
	var conflict *ConflictError
	if !errors.As(err, &conflict) || conflict.What != "pod group" {
		t.Errorf("err = %v, want a pod group conflict", err)
	}
}

func FuzzPodMembership(f *testing.F) {
	f.Add("a", "b", "c")
	f.Add("", "x.y", "Not A Name")
	f.Fuzz(func(t *testing.T, l1, l2, a1 string) {
		labels := map[string]string{QueueLabel: l1, KAIQueueLabel: l2, PodGroupLabel: l2}
		ann := map[string]string{VolcanoQueueAnnotation: a1, VolcanoGroupAnnotation: a1}
		for _, fn := range []func(map[string]string, map[string]string) (Named, error){PodQueueName, PodGroupName} {
			n, err := fn(labels, ann)
			if err == nil && n.Value != "" && len(n.Value) > 253 {
				t.Fatalf("accepted a name of %d bytes", len(n.Value))
			}
			if err != nil && n.Value != "" {
				t.Fatalf("returned %q with error %v", n.Value, err)
			}
		}
	})
}
