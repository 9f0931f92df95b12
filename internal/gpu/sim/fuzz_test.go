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
	f.Add("gpus: [{model: GB200, count: 4}]\nfabric: {clusterUUID: 7b968a6d-c8aa-45e1-9e07-e1e51be99c31, cliqueID: 3, state: in-progress}\n")
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

// FuzzParseFabric checks that no --simulate-fabric value makes ParseFabric
// panic, and that whatever it accepts is a fabric a tray starts with and
// renders back to itself.
func FuzzParseFabric(f *testing.F) {
	f.Add("7b968a6d-c8aa-45e1-9e07-e1e51be99c31.1")
	f.Add("7B968A6D-C8AA-45E1-9E07-E1E51BE99C31.32766")
	f.Add("{7b968a6d-c8aa-45e1-9e07-e1e51be99c31}.1")
	f.Add("urn:uuid:7b968a6d-c8aa-45e1-9e07-e1e51be99c31.1")
	f.Add("00000000-0000-0000-0000-000000000000.0")
	f.Add(".")
	f.Fuzz(func(t *testing.T, s string) {
		fab, err := ParseFabric(s)
		if err != nil {
			return
		}
		if back, err := ParseFabric(fab.String()); err != nil || back != fab {
			t.Fatalf("%q parsed as %+v, which renders as %q and parses back as %+v, %v", s, fab, fab.String(), back, err)
		}
		p, err := Builtin("gb200-nvl72")
		if err != nil {
			t.Fatal(err)
		}
		b, err := New(p, Options{Fabric: &fab})
		if err != nil {
			t.Fatalf("accepted fabric %q does not start a tray: %v", s, err)
		}
		_ = b.Close()
	})
}
