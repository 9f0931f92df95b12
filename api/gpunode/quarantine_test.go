package gpunode_test

import (
	"strings"
	"testing"
	"time"

	"github.com/gpuplane/gpuplane/api/gpunode"
)

func TestQuarantineRoundTrip(t *testing.T) {
	since := time.Date(2026, 11, 25, 17, 0, 0, 0, time.UTC)
	in := gpunode.QuarantineRecord{GPUs: []gpunode.QuarantinedGPU{
		{Index: 5, UUID: "GPU-5", XID: 48, Class: "memory-uncorrectable", State: gpunode.QuarantineValidating, Since: since, Fails: 1},
		{Index: 3, UUID: "GPU-3", XID: 79, Class: "bus", State: gpunode.QuarantineHeld, Node: true, Since: since, Fails: 2},
	}}
	s, err := gpunode.FormatQuarantine(in)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"v":1,"gpus":[{"gpu":3,"uuid":"GPU-3","xid":79,"class":"bus","state":"held","node":true,"since":"2026-11-25T17:00:00Z","fails":2},` +
		`{"gpu":5,"uuid":"GPU-5","xid":48,"class":"memory-uncorrectable","state":"validating","since":"2026-11-25T17:00:00Z","fails":1}]}`
	if s != want {
		t.Fatalf("FormatQuarantine =\n%s\nwant\n%s", s, want)
	}
	out, err := gpunode.ParseQuarantine(s)
	if err != nil {
		t.Fatal(err)
	}
	if len(out.GPUs) != 2 || out.GPUs[0].Index != 3 || !out.GPUs[0].Node || !out.GPUs[1].Since.Equal(since) {
		t.Fatalf("ParseQuarantine = %+v", out)
	}
	if got := gpunode.TaintValue(79); got != "xid-79" {
		t.Errorf("TaintValue(79) = %q", got)
	}
}

func TestParseQuarantineRejects(t *testing.T) {
	gpu := func(fields string) string {
		return `{"v":1,"gpus":[{"gpu":1,"uuid":"GPU-1","state":"held","since":"2026-11-25T17:00:00Z"` + fields + `}]}`
	}
	tests := []struct{ name, in, want string }{
		{"not json", "3:79", "not the quarantine JSON"},
		{"unknown field", gpu(`,"extra":1`), "unknown field"},
		{"future version", `{"v":2,"gpus":[]}`, "v: format version 2"},
		{"index out of range", `{"v":1,"gpus":[{"gpu":64,"uuid":"u","state":"held","since":"2026-11-25T17:00:00Z"}]}`, "gpus[0].gpu: must be 0 to 63"},
		{"gpu twice", `{"v":1,"gpus":[{"gpu":1,"uuid":"u","state":"held","since":"2026-11-25T17:00:00Z"},{"gpu":1,"uuid":"u","state":"held","since":"2026-11-25T17:00:00Z"}]}`, "gpus[1].gpu: GPU 1 is listed twice"},
		{"unknown state", `{"v":1,"gpus":[{"gpu":1,"uuid":"u","state":"broken","since":"2026-11-25T17:00:00Z"}]}`, `gpus[0].state: "broken"`},
		{"xid too large", gpu(`,"xid":70000`), "gpus[0].xid: must be 0 to 65536"},
		{"negative fails", gpu(`,"fails":-1`), "gpus[0].fails"},
		{"no since", `{"v":1,"gpus":[{"gpu":1,"uuid":"u","state":"held"}]}`, "gpus[0].since: missing"},
		{"since rounds to missing", `{"v":1,"gpus":[{"gpu":1,"uuid":"u","state":"held","since":"0001-01-01T00:00:00.5Z"}]}`, "gpus[0].since: 0001-01-01T00:00:00.5Z is not a time from"},
		{"since past year 9999 in UTC", `{"v":1,"gpus":[{"gpu":1,"uuid":"u","state":"held","since":"9999-12-31T23:59:59-01:00"}]}`, "gpus[0].since: 9999-12-31T23:59:59-01:00 is not"},
		{"since before year 1 in UTC", `{"v":1,"gpus":[{"gpu":1,"uuid":"u","state":"held","since":"0001-01-01T00:30:00+01:00"}]}`, "gpus[0].since"},
		{"no uuid", `{"v":1,"gpus":[{"gpu":1,"state":"held","since":"2026-11-25T17:00:00Z"}]}`, "gpus[0].uuid"},
		{"trailing", `{"v":1,"gpus":[]} {}`, "trailing data"},
		{"too large", `{"v":1,"gpus":[],"x":"` + strings.Repeat("a", gpunode.MaxAnnotationBytes) + `"}`, "bytes is more than"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := gpunode.ParseQuarantine(tt.in)
			if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.HasPrefix(err.Error(), gpunode.QuarantineAnnotation+": ") {
				t.Fatalf("ParseQuarantine = %v, want an error naming %s and containing %q", err, gpunode.QuarantineAnnotation, tt.want)
			}
		})
	}
}
