package sim

import (
	"os"
	"strings"
	"testing"
)

// FuzzParse checks that no profile file, however malformed, makes Parse
// panic, and that whatever it accepts starts a node.
func FuzzParse(f *testing.F) {
	for _, name := range []string{"testdata/two-t4.yaml", "testdata/mixed.yaml"} {
		src, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(string(src))
	}
	f.Add("gpus: [{model: T4, count: 2}]\ntopology: {pairs: [{gpus: [0, 1], nvlink: 2}]}\n")
	f.Add("gpus: &a [*a]\n")
	f.Add("gpus: [~, {count: ~}]\n")
	f.Fuzz(func(t *testing.T, src string) {
		p, err := Parse(strings.NewReader(src), "fuzz.yaml")
		if err != nil {
			if !strings.Contains(err.Error(), "fuzz.yaml") {
				t.Errorf("error does not name the file: %v", err)
			}
			return
		}
		b, err := New(p, Options{})
		if err != nil {
			t.Fatalf("accepted profile does not start: %v\n%s", err, src)
		}
		_ = b.Close()
	})
}
