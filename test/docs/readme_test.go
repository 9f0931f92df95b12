package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestREADMEAgreesWithTheMakefileAndTheDemo holds the README to at most
// 200 lines, to naming every tier `make test` runs, and to the number of
// nodes the demo starts.
func TestREADMEAgreesWithTheMakefileAndTheDemo(t *testing.T) {
	read := func(rel string) string {
		data, err := os.ReadFile(filepath.Join(root(t), rel))
		if err != nil {
			t.Fatal(err)
		}
		return string(data)
	}
	readme, makefile, demo := read("README.md"), read("Makefile"), read("hack/demo.sh")
	if n := strings.Count(readme, "\n"); n > 200 {
		t.Errorf("README.md has %d lines, more than 200: move detail into docs/", n)
	}

	// The tiers: the lanes of TEST_LANES, name=targets, less the builds.
	lanes := regexp.MustCompile(`(?s)TEST_LANES = \\\n(.*?)\n\n`).FindStringSubmatch(makefile)
	if lanes == nil {
		t.Fatal("no TEST_LANES in the Makefile")
	}
	var tiers []string
	for _, m := range regexp.MustCompile(`(?:nice:)?([a-z-]+)=`).FindAllStringSubmatch(lanes[1], -1) {
		if !strings.HasSuffix(m[1], "-bins") {
			tiers = append(tiers, m[1])
		}
	}
	line := regexp.MustCompile(`(?m)^make test +# (.*)$`).FindStringSubmatch(readme)
	if line == nil {
		t.Fatal("README.md has no `make test   # ...` line")
	}
	for _, tier := range tiers {
		if !strings.Contains(line[1], tier) {
			t.Errorf("README.md's make test line does not name the tier %q (TEST_LANES runs %v): %q", tier, tiers, line[1])
		}
	}
	words := []string{"zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"}
	if len(tiers) < len(words) && !strings.Contains(readme, "`make test` runs "+words[len(tiers)]+" tiers") {
		t.Errorf("README.md does not say `make test` runs %s tiers", words[len(tiers)])
	}

	// The demo's nodes: the first dev up's --node-profiles.
	profiles := regexp.MustCompile(`--node-profiles ([^ \n]+)`).FindStringSubmatch(demo)
	if profiles == nil {
		t.Fatal("hack/demo.sh starts no --node-profiles cluster")
	}
	n := len(strings.Split(profiles[1], ","))
	if n >= len(words) || !strings.Contains(readme, words[n]+" simulated DGX H100 nodes") {
		t.Errorf("README.md does not say the demo starts %d (%s) simulated DGX H100 nodes", n, words[min(n, len(words)-1)])
	}
}
