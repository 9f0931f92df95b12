package reasons

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// notEmitters are the source trees that write no reason of gpuplane's own:
// the simulated kubelet and control plane (test and dev tooling, whose
// events are the kubelet's), the simulator, test helpers and the CLI,
// which only reads reasons.
var notEmitters = []string{"internal/nodesim", "internal/localcluster", "internal/simulator", "internal/testutil", "internal/cli"}

// reasonCalls are the functions whose argument at the index given is a
// reason: the adapter's constructors of a pod's wait reason, and event
// recorders (the quarantine's recorder takes no object).
var reasonCalls = map[string][]int{
	"badInput": {0}, "wait": {0}, "fail": {1}, "failSet": {1},
	"event": {2}, "Event": {2}, "Eventf": {1, 2}, "podCondition": {1},
}

// reasonFields are struct fields that hold a reason or a wait code.
var reasonFields = map[string]bool{"Reason": true, "ErrCode": true, "Code": true}

// reasonConst names the constants that hold a reason or condition type.
var reasonConst = regexp.MustCompile(`^(Reason|EventReason|Unplaced|Condition)[A-Z]`)

var reasonLike = regexp.MustCompile(`^[A-Z][A-Za-z]+$`)

// emitted scans the product's sources (api/ and internal/, no tests) for
// the reasons they write, as literals at the places above and as the
// values of reason constants, and returns them with where each was seen.
func emitted(t *testing.T, root string) map[string]string {
	t.Helper()
	found := map[string]string{}
	add := func(fset *token.FileSet, pos token.Pos, v string) {
		if reasonLike.MatchString(v) && v != "Warning" && v != "Normal" {
			if _, ok := found[v]; !ok {
				found[v] = fset.Position(pos).String()
			}
		}
	}
	lit := func(e ast.Expr) (string, bool) {
		b, ok := e.(*ast.BasicLit)
		if !ok || b.Kind != token.STRING {
			return "", false
		}
		s, err := strconv.Unquote(b.Value)
		return s, err == nil
	}
	for _, dir := range []string{"api", "internal"} {
		err := filepath.WalkDir(filepath.Join(root, dir), func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(root, path)
			if d.IsDir() {
				if slices.Contains(notEmitters, filepath.ToSlash(rel)) || d.Name() == "testdata" {
					return filepath.SkipDir
				}
				return nil
			}
			if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return nil
			}
			fset := token.NewFileSet()
			f, err := parser.ParseFile(fset, path, nil, 0)
			if err != nil {
				return err
			}
			ast.Inspect(f, func(n ast.Node) bool {
				switch n := n.(type) {
				case *ast.ValueSpec:
					for i, name := range n.Names {
						if reasonConst.MatchString(name.Name) && i < len(n.Values) {
							if v, ok := lit(n.Values[i]); ok {
								add(fset, name.Pos(), v)
							}
						}
					}
				case *ast.KeyValueExpr:
					if k, ok := n.Key.(*ast.Ident); ok && reasonFields[k.Name] {
						if v, ok := lit(n.Value); ok {
							add(fset, n.Pos(), v)
						}
					}
				case *ast.CallExpr:
					var name string
					switch fn := n.Fun.(type) {
					case *ast.Ident:
						name = fn.Name
					case *ast.SelectorExpr:
						name = fn.Sel.Name
					}
					for _, i := range reasonCalls[name] {
						if i >= len(n.Args) {
							continue
						}
						if v, ok := lit(n.Args[i]); ok {
							add(fset, n.Args[i].Pos(), v)
						}
						// "MIGConfig"+reason: the prefix of a family of events.
						if b, ok := n.Args[i].(*ast.BinaryExpr); ok && b.Op == token.ADD {
							if v, ok := lit(b.X); ok {
								found["prefix:"+v] = fset.Position(b.Pos()).String()
							}
						}
					}
				}
				return true
			})
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return found
}

// TestEveryEmittedReasonIsCatalogued fails when the sources write a reason
// that All lacks: add it to All and give it an entry in
// docs/troubleshooting.md.
func TestEveryEmittedReasonIsCatalogued(t *testing.T) {
	found := emitted(t, filepath.Join("..", ".."))
	if len(found) < 50 {
		t.Fatalf("found only %d reasons in the sources: the scan is broken", len(found))
	}
	for v, where := range found {
		if p, ok := strings.CutPrefix(v, "prefix:"); ok {
			if p != MIGEventPrefix {
				t.Errorf("%s: events named %q + a reason are not catalogued", where, p)
			}
			continue
		}
		if !Known(v) && !notReasons[v] {
			t.Errorf("%s: reason %q is written but not in reasons.All", where, v)
		}
	}
}

// notReasons are values the scan meets at a reason's place that name no
// reason of gpuplane's: values of other enumerations held in a field
// named Code or Reason.
var notReasons = map[string]bool{}

func TestCatalogue(t *testing.T) {
	seen := map[string]bool{}
	for _, r := range All {
		key := string(r.Kind) + "/" + r.Object + "/" + r.Condition + "/" + r.Name
		if seen[key] {
			t.Errorf("%s is catalogued twice", key)
		}
		seen[key] = true
		if !reasonLike.MatchString(r.Name) {
			t.Errorf("%q is no reason: want CamelCase", r.Name)
		}
		if (r.Kind == ConditionReason) != (r.Condition != "") {
			t.Errorf("%s: a condition reason, and only one, names its condition", r.Name)
		}
		if r.By != Scheduler && r.By != Agent {
			t.Errorf("%s: written by %q", r.Name, r.By)
		}
	}
	if got := URL("DoesNotFit"); got != DocsURL+"#doesnotfit" {
		t.Errorf("URL(DoesNotFit) = %s", got)
	}
	if got := URL("MIGConfigEvictionBlocked"); got != DocsURL+"#evictionblocked" {
		t.Errorf("URL(MIGConfigEvictionBlocked) = %s", got)
	}
	if got := URL("NoSuchReason"); got != DocsURL {
		t.Errorf("URL of an unknown reason = %s, want the page", got)
	}
}
