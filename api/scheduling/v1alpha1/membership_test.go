package v1alpha1

import (
	"errors"
	"regexp"
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

// FuzzPodMembership checks PodQueueName and PodGroupName against an
// oracle written from their documentation: the first key, in precedence
// order, with a value names the object; that value must be a DNS-1123
// subdomain; a later key with another value is a conflict.
func FuzzPodMembership(f *testing.F) {
	f.Add("a", "b", "c", "")
	f.Add("", "x.y", "Not A Name", "x.y")
	f.Add("q", "", "", "q")
	f.Add("", "", "", strings.Repeat("a", 254))
	f.Add("a-", "", "-a", "a..b")
	f.Fuzz(func(t *testing.T, v0, v1, v2, v3 string) {
		values := []string{v0, v1, v2, v3}
		for _, c := range []struct {
			what string
			keys []Key
			fn   func(map[string]string, map[string]string) (Named, error)
		}{
			{"queue", QueueKeys, PodQueueName},
			{"pod group", GroupKeys, PodGroupName},
		} {
			labels, annotations := map[string]string{}, map[string]string{}
			for i, k := range c.keys {
				if k.Annotation {
					annotations[k.Name] = values[i]
				} else {
					labels[k.Name] = values[i]
				}
			}
			want, wantErr := membershipOracle(c.what, c.keys, values)
			got, err := c.fn(labels, annotations)
			if !sameMembershipError(err, wantErr) || got != want {
				t.Fatalf("%s of %q: %+v, %v; want %+v, %v", c.what, values[:len(c.keys)], got, err, want, wantErr)
			}
		}
	})
}

// dns1123Subdomain is an object's name: at most 253 characters, dot-separated
// parts of lowercase letters, digits and inner hyphens.
var dns1123Subdomain = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)

func membershipOracle(what string, keys []Key, values []string) (Named, error) {
	var first Named
	for i, k := range keys {
		v := values[i]
		switch {
		case v == "":
		case first.Value == "" && (len(v) > 253 || !dns1123Subdomain.MatchString(v)):
			return Named{}, &InvalidNameError{What: what, N: Named{Value: v, From: k}}
		case first.Value == "":
			first = Named{Value: v, From: k}
		case v != first.Value:
			return Named{}, &ConflictError{What: what, A: first, B: Named{Value: v, From: k}}
		}
	}
	return first, nil
}

// sameMembershipError compares the kind and the fields of two errors,
// leaving out InvalidNameError's wording of why.
func sameMembershipError(got, want error) bool {
	var gc, wc *ConflictError
	var gi, wi *InvalidNameError
	switch {
	case want == nil:
		return got == nil
	case errors.As(want, &wc):
		return errors.As(got, &gc) && *gc == *wc
	case errors.As(want, &wi):
		return errors.As(got, &gi) && gi.What == wi.What && gi.N == wi.N && gi.Why != ""
	}
	return false
}
