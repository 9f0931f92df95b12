package docgen

import (
	"encoding/xml"
	"strings"
	"testing"
)

// TestTerminalSVG checks that a command's output becomes well-formed SVG
// with every line, escaped.
func TestTerminalSVG(t *testing.T) {
	out := string(TerminalSVG("gpuplane status", "NODE\tGPUS\ngpu-node-1  8/8 <ready> & \"ok\"\n"))
	if err := xml.Unmarshal([]byte(out), new(struct{})); err != nil {
		t.Fatalf("not well-formed XML: %v\n%s", err, out)
	}
	for _, want := range []string{">$ gpuplane status<", ">NODE    GPUS<", "gpu-node-1  8/8 &lt;ready&gt; &amp; &#34;ok&#34;"} {
		if !strings.Contains(out, want) {
			t.Errorf("lacks %q:\n%s", want, out)
		}
	}
}
