package cli

import (
	"bytes"
	"strings"
	"testing"
)

func TestVersionFlag(t *testing.T) {
	var out bytes.Buffer
	if rc := Main([]string{"--version"}, &out, &out); rc != 0 {
		t.Fatalf("exit %d: %s", rc, out.String())
	}
	if !strings.HasPrefix(out.String(), "gpuplane ") || !strings.Contains(out.String(), "go1.") {
		t.Errorf("--version printed %q", out.String())
	}
}
