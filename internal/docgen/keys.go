package docgen

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// key is a label, annotation or taint key defined in api/.
type key struct {
	pkg, name, value, kind, doc string
}

// keyName picks the constants that name a key, and keyValue the values
// that are one (a qualified name, optionally with a prefix).
var (
	keyName  = regexp.MustCompile(`(Label|Annotation|Taint)`)
	keyValue = regexp.MustCompile(`^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$`)
)

// keysPage lists the label, annotation and taint keys the constants of
// api/ define, with their Go comments, by package.
func keysPage(root string, out Pages) error {
	keys, err := apiKeys(filepath.Join(root, "api"))
	if err != nil {
		return err
	}
	if len(keys) < 20 {
		return fmt.Errorf("found only %d keys in api/: the scan is broken", len(keys))
	}
	var b strings.Builder
	b.WriteString(header("Labels, annotations and taints", "the constants of api/"))
	b.WriteString("Every label, annotation and taint key gpuplane reads or writes, as `api/` defines it (the one\n" +
		"place each is defined; their parsers bound what they accept). Keys of other projects are\n" +
		"those gpuplane reads as written.\n")
	byPkg := map[string][]key{}
	for _, k := range keys {
		byPkg[k.pkg] = append(byPkg[k.pkg], k)
	}
	for _, pkg := range sortedKeys(byPkg) {
		fmt.Fprintf(&b, "\n## %s\n\n| key | kind | constant | meaning |\n| --- | --- | --- | --- |\n", pkg)
		for _, k := range byPkg[pkg] {
			fmt.Fprintf(&b, "| `%s` | %s | `%s` | %s |\n", k.value, k.kind, k.name, cell(k.doc))
		}
	}
	gfd, err := featureLabelsSection()
	if err != nil {
		return err
	}
	b.WriteString(gfd)
	out[Dir+"/labels-annotations.md"] = []byte(b.String())
	return nil
}

// apiKeys parses the non-test Go files under dir and returns the string
// constants whose names say they are a label, annotation or taint key,
// with their values worked out (concatenations of other constants of
// api/ included).
func apiKeys(dir string) ([]key, error) {
	type spec struct {
		pkg, name, doc string
		expr           ast.Expr
	}
	var specs []spec
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, path, nil, parser.ParseComments)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(filepath.Dir(dir), filepath.Dir(path))
		for _, decl := range f.Decls {
			g, ok := decl.(*ast.GenDecl)
			if !ok || g.Tok != token.CONST {
				continue
			}
			for _, s := range g.Specs {
				vs := s.(*ast.ValueSpec)
				doc := vs.Doc.Text()
				if doc == "" && len(g.Specs) == 1 {
					doc = g.Doc.Text()
				}
				for i, n := range vs.Names {
					if i < len(vs.Values) {
						specs = append(specs, spec{pkg: filepath.ToSlash(rel), name: f.Name.Name + "." + n.Name, doc: doc, expr: vs.Values[i]})
					}
				}
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	// Work the values out until nothing changes: a constant may be built
	// from others, of its package (Name) or of another (pkg.Name).
	vals := map[string]string{}
	var eval func(pkg string, e ast.Expr) (string, bool)
	eval = func(pkg string, e ast.Expr) (string, bool) {
		switch e := e.(type) {
		case *ast.BasicLit:
			if e.Kind != token.STRING {
				return "", false
			}
			s, err := strconv.Unquote(e.Value)
			return s, err == nil
		case *ast.Ident:
			v, ok := vals[pkg+"."+e.Name]
			return v, ok
		case *ast.SelectorExpr:
			if x, ok := e.X.(*ast.Ident); ok {
				v, ok := vals[x.Name+"."+e.Sel.Name]
				return v, ok
			}
		case *ast.BinaryExpr:
			if e.Op == token.ADD {
				x, ok1 := eval(pkg, e.X)
				y, ok2 := eval(pkg, e.Y)
				return x + y, ok1 && ok2
			}
		case *ast.ParenExpr:
			return eval(pkg, e.X)
		case *ast.CallExpr:
			// A typed constant: T("...").
			if len(e.Args) == 1 {
				return eval(pkg, e.Args[0])
			}
		}
		return "", false
	}
	for changed := true; changed; {
		changed = false
		for _, s := range specs {
			if _, done := vals[s.name]; done {
				continue
			}
			pkg, _, _ := strings.Cut(s.name, ".")
			if v, ok := eval(pkg, s.expr); ok {
				vals[s.name] = v
				changed = true
			}
		}
	}
	var keys []key
	for _, s := range specs {
		_, short, _ := strings.Cut(s.name, ".")
		v, ok := vals[s.name]
		m := keyName.FindString(short)
		if !ok || m == "" || strings.HasSuffix(short, "Prefix") || strings.HasSuffix(short, "Value") || !keyValue.MatchString(v) || !strings.ContainsAny(v, "./") {
			continue
		}
		keys = append(keys, key{pkg: s.pkg, name: s.name, value: v, kind: strings.ToLower(m), doc: s.doc})
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].pkg != keys[j].pkg {
			return keys[i].pkg < keys[j].pkg
		}
		return keys[i].value < keys[j].value
	})
	return keys, nil
}
