package buildinfo

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// Annotations through which the cluster reports its builds.
const (
	// AgentAnnotation is on each Node that runs gpuplane-agent.
	AgentAnnotation = "gpuplane.io/agent-build"
	// SchedulerAnnotation is on the leader Lease of gpuplane-scheduler.
	SchedulerAnnotation = "gpuplane.io/scheduler-build"
)

// Bounds of an annotation value and of each of its fields.
const (
	MaxBytes      = 1024
	MaxFieldBytes = 128
)

// Info says which build a binary is.
type Info struct {
	// Version is the release (git describe at build time, or the module
	// version `go install` recorded), "devel" when neither is known.
	Version string `json:"version"`
	// Commit is the git commit built, with "-dirty" when the tree had
	// uncommitted changes; empty when unknown.
	Commit string `json:"commit,omitempty"`
	// Date is the commit's time, RFC 3339; empty when unknown.
	Date string `json:"date,omitempty"`
	// GoVersion is the Go toolchain that built the binary.
	GoVersion string `json:"goVersion"`
	// KubernetesClient is the version of k8s.io/client-go linked in.
	KubernetesClient string `json:"kubernetesClient,omitempty"`
	// Platform is GOOS/GOARCH.
	Platform string `json:"platform,omitempty"`
}

// Encode returns the annotation value of i.
func Encode(i Info) (string, error) {
	if err := i.Validate(); err != nil {
		return "", err
	}
	b, err := json.Marshal(i)
	if err != nil {
		return "", fmt.Errorf("encoding the build info: %w", err)
	}
	return string(b), nil
}

// Parse reads the value of the annotation key (named in errors). Fields
// it does not know, written by a newer build, are ignored.
func Parse(key, value string) (Info, error) {
	var i Info
	if len(value) > MaxBytes {
		return i, fmt.Errorf("annotation %s: %d bytes, at most %d allowed", key, len(value), MaxBytes)
	}
	dec := json.NewDecoder(bytes.NewReader([]byte(value)))
	if err := dec.Decode(&i); err != nil {
		return Info{}, fmt.Errorf("annotation %s: not the JSON of a build (%w): %q", key, err, value)
	}
	if dec.More() {
		return Info{}, fmt.Errorf("annotation %s: data after the JSON object", key)
	}
	if err := i.Validate(); err != nil {
		return Info{}, fmt.Errorf("annotation %s: %w", key, err)
	}
	return i, nil
}

// Validate checks every field against the bounds and the character set.
func (i Info) Validate() error {
	if i.Version == "" {
		return fmt.Errorf("version: must not be empty")
	}
	for _, f := range []struct{ name, v string }{
		{"version", i.Version}, {"commit", i.Commit}, {"date", i.Date},
		{"goVersion", i.GoVersion}, {"kubernetesClient", i.KubernetesClient}, {"platform", i.Platform},
	} {
		if len(f.v) > MaxFieldBytes {
			return fmt.Errorf("%s: %d bytes, at most %d allowed", f.name, len(f.v), MaxFieldBytes)
		}
		for j := 0; j < len(f.v); j++ {
			if !allowed(f.v[j]) {
				return fmt.Errorf("%s: %q has character %q; allowed are letters, digits and . _ + - : / ( ) and space", f.name, f.v, f.v[j])
			}
		}
	}
	return nil
}

func allowed(c byte) bool {
	switch {
	case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		return true
	}
	switch c {
	case '.', '_', '+', '-', ':', '/', '(', ')', ' ':
		return true
	}
	return false
}
