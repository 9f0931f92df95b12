package valuesdoc

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	yaml "go.yaml.in/yaml/v3"
)

// Chart is what the README's title says of the chart (Chart.yaml's name
// and description).
type Chart struct {
	Name        string `yaml:"name"`
	Description string `yaml:"description"`
}

// section is one heading of the README with the rows of its table.
type section struct {
	title string
	intro []string
	rows  []row
}

type row struct {
	key, def, doc string
}

// Generate returns the README of the chart whose Chart.yaml and values.yaml
// are given. An undocumented value is an error naming its key.
func Generate(chartYAML, valuesYAML []byte) ([]byte, error) {
	var c Chart
	if err := yaml.Unmarshal(chartYAML, &c); err != nil {
		return nil, fmt.Errorf("reading the chart's Chart.yaml: %w", err)
	}
	if c.Name == "" {
		return nil, errors.New("reading the chart's Chart.yaml: it has no name")
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(valuesYAML, &doc); err != nil {
		return nil, fmt.Errorf("values.yaml: %w", err)
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 || doc.Content[0].Kind != yaml.MappingNode {
		return nil, fmt.Errorf("values.yaml: not a mapping")
	}
	// The comment at the top is the document's up to the first section;
	// the sections in it belong to the first key.
	var intro, rest []string
	for _, blk := range strings.Split(doc.HeadComment, "\n\n") {
		if len(rest) > 0 || strings.HasPrefix(blk, "## ") {
			rest = append(rest, blk)
			continue
		}
		intro = append(intro, blk)
	}
	top := doc.Content[0]
	if len(rest) > 0 && len(top.Content) > 0 {
		first := top.Content[0]
		first.HeadComment = strings.Join(append(rest, first.HeadComment), "\n\n")
	}
	w := &walker{}
	if err := w.mapping(top, ""); err != nil {
		return nil, err
	}

	var b bytes.Buffer
	fmt.Fprintf(&b, "# %s\n\n", c.Name)
	if d := strings.TrimSpace(c.Description); d != "" {
		fmt.Fprintf(&b, "%s\n\n", oneLine(d))
	}
	for _, p := range paragraphs(strings.Join(intro, "\n#\n")) {
		fmt.Fprintf(&b, "%s\n\n", text(p))
	}
	for _, s := range w.sections {
		fmt.Fprintf(&b, "## %s\n\n", s.title)
		for _, p := range s.intro {
			fmt.Fprintf(&b, "%s\n\n", text(p))
		}
		if len(s.rows) == 0 {
			continue
		}
		b.WriteString("| value | default | description |\n| --- | --- | --- |\n")
		for _, r := range s.rows {
			fmt.Fprintf(&b, "| `%s` | %s | %s |\n", r.key, cell(r.def), cell(r.doc))
		}
		b.WriteString("\n")
	}
	return bytes.TrimRight(b.Bytes(), "\n"), nil
}

type walker struct {
	sections []*section
}

// mapping documents the keys of m, whose own key is prefix.
func (w *walker) mapping(m *yaml.Node, prefix string) error {
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := m.Content[i], m.Content[i+1]
		key := k.Value
		if prefix != "" {
			key = prefix + "." + k.Value
		}
		if k.FootComment != "" || v.FootComment != "" {
			return fmt.Errorf("values.yaml: the comment below %s belongs to no key: move it above the next key", key)
		}
		docText := w.head(k.HeadComment)
		if docText == "" {
			docText = strings.Join(paragraphs(k.LineComment+v.LineComment), " ")
		}
		if isGroup(v) {
			if docText != "" {
				w.row(row{key: key, doc: docText})
			}
			if err := w.mapping(v, key); err != nil {
				return err
			}
			continue
		}
		if docText == "" {
			return fmt.Errorf("values.yaml: %s has no comment saying what it does", key)
		}
		def, err := value(v)
		if err != nil {
			return fmt.Errorf("values.yaml: %s: %w", key, err)
		}
		w.row(row{key: key, def: def, doc: docText})
	}
	return nil
}

// head reads a key's head comment: the sections it opens, paragraphs of
// the current section's introduction, and the key's own text (the block
// right above it), which it returns.
func (w *walker) head(comment string) string {
	if comment == "" {
		return ""
	}
	blocks := strings.Split(comment, "\n\n")
	own := ""
	if last := blocks[len(blocks)-1]; !strings.HasPrefix(last, "## ") {
		own = strings.Join(paragraphs(last), " ")
		blocks = blocks[:len(blocks)-1]
	}
	for _, blk := range blocks {
		if title, rest, ok := strings.Cut(blk, "\n"); strings.HasPrefix(blk, "## ") {
			if !ok {
				rest = ""
			}
			w.sections = append(w.sections, &section{title: strings.TrimSpace(strings.TrimPrefix(title, "## ")), intro: paragraphs(rest)})
			continue
		}
		if len(w.sections) == 0 {
			w.sections = append(w.sections, &section{title: "Values"})
		}
		s := w.sections[len(w.sections)-1]
		s.intro = append(s.intro, paragraphs(blk)...)
	}
	return own
}

func (w *walker) row(r row) {
	if len(w.sections) == 0 {
		w.sections = append(w.sections, &section{title: "Values"})
	}
	s := w.sections[len(w.sections)-1]
	s.rows = append(s.rows, r)
}

// isGroup says whether v is a mapping of documented keys, or of groups.
func isGroup(v *yaml.Node) bool {
	if v.Kind != yaml.MappingNode {
		return false
	}
	for i := 0; i+1 < len(v.Content); i += 2 {
		if v.Content[i].HeadComment != "" || isGroup(v.Content[i+1]) {
			return true
		}
	}
	return false
}

// value is v's default as compact JSON.
func value(v *yaml.Node) (string, error) {
	var x any
	if err := v.Decode(&x); err != nil {
		return "", err
	}
	b, err := json.Marshal(x)
	if err != nil {
		return "", err
	}
	return "`" + string(b) + "`", nil
}

// paragraphs turns a YAML comment block into Markdown paragraphs: the
// comment marks stripped, lines joined, a bare "#" line ending a
// paragraph, lines indented past the comment mark kept as a code block.
func paragraphs(comment string) []string {
	var out, cur []string
	flush := func() {
		if len(cur) > 0 {
			out = append(out, strings.Join(cur, " "))
			cur = nil
		}
	}
	var code []string
	for line := range strings.Lines(comment) {
		line = strings.TrimRight(line, "\r\n")
		t := strings.TrimPrefix(strings.TrimSpace(line), "#")
		switch {
		case strings.TrimSpace(t) == "":
			flush()
			if len(code) > 0 {
				out = append(out, "```sh\n"+strings.Join(code, "\n")+"\n```")
				code = nil
			}
		case strings.HasPrefix(t, "   "):
			flush()
			code = append(code, strings.TrimSpace(t))
		default:
			if len(code) > 0 {
				out = append(out, "```sh\n"+strings.Join(code, "\n")+"\n```")
				code = nil
			}
			cur = append(cur, strings.TrimSpace(t))
		}
	}
	flush()
	if len(code) > 0 {
		out = append(out, "```sh\n"+strings.Join(code, "\n")+"\n```")
	}
	return out
}

func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// cell escapes text for one cell of a Markdown table.
func cell(s string) string {
	return strings.ReplaceAll(text(oneLine(s)), "|", `\|`)
}

// text escapes the angle brackets of a paragraph outside its code spans,
// so that <name> shows as written instead of as an HTML tag; a code block
// is left as it is.
func text(p string) string {
	if strings.HasPrefix(p, "```") {
		return p
	}
	var b strings.Builder
	code := false
	for _, r := range p {
		switch {
		case r == '`':
			code = !code
			b.WriteRune(r)
		case !code && r == '<':
			b.WriteString("&lt;")
		case !code && r == '>':
			b.WriteString("&gt;")
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}
