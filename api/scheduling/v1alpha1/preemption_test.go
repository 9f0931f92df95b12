package v1alpha1

import (
	"strings"
	"testing"
	"time"
)

func TestParseLastCheckpoint(t *testing.T) {
	now := time.Date(2026, 11, 27, 22, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		v    string
		want time.Time
		err  string
	}{
		{"2026-11-27T21:30:00Z", time.Date(2026, 11, 27, 21, 30, 0, 0, time.UTC), ""},
		{"2026-11-27T22:30:00+01:00", time.Date(2026, 11, 27, 21, 30, 0, 0, time.UTC), ""},
		{"2026-11-27T22:00:30Z", time.Date(2026, 11, 27, 22, 0, 30, 0, time.UTC), ""}, // within the skew allowed
		{"2026-11-27T22:05:00Z", time.Time{}, "in the future"},
		{"yesterday", time.Time{}, "not an RFC 3339 time"},
		{"", time.Time{}, "not an RFC 3339 time"},
		{strings.Repeat("9", 65), time.Time{}, "more than the 64"},
	} {
		got, err := ParseLastCheckpoint(tc.v, now)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) || !strings.Contains(err.Error(), LastCheckpointAnnotation) {
				t.Errorf("%q: err = %v, want one naming the annotation and saying %q", tc.v, err, tc.err)
			}
			continue
		}
		if err != nil || !got.Equal(tc.want) {
			t.Errorf("%q: got %v, %v; want %v", tc.v, got, err, tc.want)
		}
	}
}

func TestParseMinRuntime(t *testing.T) {
	for _, tc := range []struct {
		v    string
		want time.Duration
		ok   bool
	}{
		{"30m", 30 * time.Minute, true}, {"0s", 0, true}, {"168h", MaxMinRuntime, true},
		{"169h", 0, false}, {"-1m", 0, false}, {"soon", 0, false}, {strings.Repeat("1", 40) + "s", 0, false},
	} {
		got, err := ParseMinRuntime(tc.v)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("%q: got %v, %v; want %v (ok %v)", tc.v, got, err, tc.want, tc.ok)
		}
		if err != nil && !strings.Contains(err.Error(), MinRuntimeAnnotation) {
			t.Errorf("%q: err %v does not name the annotation", tc.v, err)
		}
	}
}

// The values are read from the cluster: any input gets a time not after
// now's allowance, or an error, and never a panic.
func FuzzParseLastCheckpoint(f *testing.F) {
	for _, s := range []string{"2026-11-27T21:30:00Z", "2026-11-27T22:30:00+01:00", "yesterday", "", "9999-12-31T23:59:59Z"} {
		f.Add(s)
	}
	now := time.Date(2026, 11, 27, 22, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, v string) {
		got, err := ParseLastCheckpoint(v, now)
		if err == nil && got.After(now.Add(time.Minute)) {
			t.Fatalf("%q: accepted %v, after now", v, got)
		}
	})
}

func FuzzParseMinRuntime(f *testing.F) {
	for _, s := range []string{"30m", "1h30m", "-1s", "forever", "168h"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		d, err := ParseMinRuntime(v)
		if err == nil && (d < 0 || d > MaxMinRuntime) {
			t.Fatalf("%q: accepted %v, out of bounds", v, d)
		}
	})
}
