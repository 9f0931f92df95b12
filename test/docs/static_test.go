package docs

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/gpuplane/gpuplane/api/reasons"
)

// pages parses every page once per test.
func pages(t *testing.T) map[string]*page {
	t.Helper()
	out := map[string]*page{}
	for _, rel := range docPages(t) {
		out[rel] = parsePage(t, rel)
	}
	return out
}

// resolve returns the repository path a page's link names, and its anchor;
// ok is false for links that leave the repository (a URL).
func resolve(from, target string) (file, anchor string, ok bool) {
	if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
		return "", "", false
	}
	file, anchor, _ = strings.Cut(target, "#")
	if file == "" {
		return from, anchor, true
	}
	return path.Clean(path.Join(path.Dir(from), file)), anchor, true
}

// TestLinks checks that every relative link of the README and docs/ names
// a file of the repository, and an anchor of it that exists.
func TestLinks(t *testing.T) {
	all := pages(t)
	cache := map[string]*page{}
	for rel, p := range all {
		for _, l := range p.links {
			file, anchor, ok := resolve(rel, l.target)
			if !ok {
				continue
			}
			if strings.HasPrefix(file, "../") {
				t.Errorf("%s:%d: link %s leaves the repository", rel, l.line, l.target)
				continue
			}
			if _, err := os.Stat(filepath.Join(root(t), file)); err != nil {
				t.Errorf("%s:%d: link %s: %s does not exist", rel, l.line, l.target, file)
				continue
			}
			if anchor == "" {
				continue
			}
			if !strings.HasSuffix(file, ".md") {
				t.Errorf("%s:%d: link %s: an anchor into a file that is not Markdown", rel, l.line, l.target)
				continue
			}
			target := all[file]
			if target == nil {
				if target = cache[file]; target == nil {
					target = parsePage(t, file)
					cache[file] = target
				}
			}
			if !target.anchors[anchor] {
				t.Errorf("%s:%d: link %s: %s has no heading with anchor #%s", rel, l.line, l.target, file, anchor)
			}
		}
	}
}

// TestEveryPageReachableFromREADME follows links from the README through
// the Markdown pages of the repository and fails on a docs/ page it never
// reaches.
func TestEveryPageReachableFromREADME(t *testing.T) {
	all := pages(t)
	seen := map[string]bool{"README.md": true}
	queue := []string{"README.md"}
	for len(queue) > 0 {
		rel := queue[0]
		queue = queue[1:]
		p := all[rel]
		if p == nil {
			if _, err := os.Stat(filepath.Join(root(t), rel)); err != nil {
				continue
			}
			p = parsePage(t, rel)
		}
		for _, l := range p.links {
			file, _, ok := resolve(rel, l.target)
			if ok && strings.HasSuffix(file, ".md") && !seen[file] {
				seen[file] = true
				queue = append(queue, file)
			}
		}
	}
	for rel := range all {
		if !seen[rel] {
			t.Errorf("%s is not reachable from README.md: link it from docs/index.md or a page under it", rel)
		}
	}
}

// TestTroubleshootingHasEveryReason checks that every condition and reason
// in api/reasons has its entry in docs/troubleshooting.md, at the anchor
// reasons.URL points to.
func TestTroubleshootingHasEveryReason(t *testing.T) {
	p := parsePage(t, "docs/troubleshooting.md")
	if !strings.HasSuffix(reasons.DocsURL, "/docs/troubleshooting.md") {
		t.Fatalf("reasons.DocsURL %s does not name docs/troubleshooting.md", reasons.DocsURL)
	}
	for _, r := range reasons.All {
		if !p.anchors[r.Slug()] {
			t.Errorf("%s (%s on %s, by %s) has no entry: add a heading `%s` to docs/troubleshooting.md", r.Name, r.Kind, r.Object, r.By, r.Name)
		}
	}
}

// Shell languages, and what a shell block may say it needs instead of
// running in TestDocsOnControlPlane.
var (
	shellLangs = map[string]bool{"sh": true, "bash": true, "shell": true, "console": true}
	needs      = map[string]bool{"real cluster": true, "GPU node": true, "local cluster": true, "make target": true, "benchmark": true, "openb trace": true, "long-running process": true, "published release": true, "interactive shell": true}
	yamlKinds  = map[string]bool{"helm values": true, "agent config": true, "mig-parted config": true, "simulated profile": true, "fragment": true}
)

// TestBlocksAreMarked checks every block's marker: a shell block's needs
// are known, a YAML block's kind is known and its text parses as YAML.
// Blocks whose language is neither are output or code and not checked.
func TestBlocksAreMarked(t *testing.T) {
	for _, p := range pages(t) {
		for _, b := range p.blocks {
			if shellLangs[b.lang] {
				if n, ok := b.mark("needs"); ok && !needs[n] {
					t.Errorf("%s: needs %q: want one of real cluster, GPU node, local cluster, make target, benchmark, openb trace, long-running process, published release, interactive shell", b, n)
				}
				if _, ok := b.mark("yaml"); ok {
					t.Errorf("%s: a yaml marker on a shell block", b)
				}
				continue
			}
			if b.lang != "yaml" && b.lang != "yml" {
				if _, ok := b.mark("needs"); ok {
					t.Errorf("%s: a needs marker on a %q block, which is never run", b, b.lang)
				}
				continue
			}
			if k, ok := b.mark("yaml"); ok && !yamlKinds[k] && !strings.HasPrefix(k, "other:") {
				t.Errorf("%s: yaml %q: want helm values, agent config, mig-parted config, simulated profile, fragment or other: WHAT", b, k)
			}
			if _, err := yamlDocs(b.text); err != nil {
				t.Errorf("%s: %v", b, err)
			}
		}
	}
}

// yamlDocs decodes every document of a YAML stream.
func yamlDocs(text string) ([]map[string]any, error) {
	dec := yaml.NewDecoder(bytes.NewReader([]byte(text)))
	var out []map[string]any
	for {
		var doc map[string]any
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		if doc != nil {
			out = append(out, doc)
		}
	}
}
