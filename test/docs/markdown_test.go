package docs

import (
	"bufio"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// block is one fenced code block of a page.
type block struct {
	file  string // relative to the repository root
	line  int    // of the opening fence
	lang  string
	text  string
	marks []string // the comments beside it, without <!-- -->
}

func (b block) String() string { return b.file + ":" + strconv.Itoa(b.line) }

// mark returns the value of the block's marker "key: value", if any.
func (b block) mark(key string) (string, bool) {
	for _, m := range b.marks {
		if v, ok := strings.CutPrefix(m, key+":"); ok {
			return strings.TrimSpace(v), true
		}
	}
	return "", false
}

type link struct {
	line   int
	target string
}

// page is a parsed Markdown file.
type page struct {
	path    string // relative to the repository root
	blocks  []block
	links   []link
	anchors map[string]bool
}

// root is the repository's root: this package is test/docs.
func root(t testing.TB) string {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(wd, "..", "..")
}

// docPages lists README.md and every Markdown page under docs/.
func docPages(t testing.TB) []string {
	t.Helper()
	pages := []string{"README.md"}
	err := filepath.WalkDir(filepath.Join(root(t), "docs"), func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(path, ".md") {
			rel, _ := filepath.Rel(root(t), path)
			pages = append(pages, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(pages)
	return pages
}

var (
	commentLine = regexp.MustCompile(`^<!--\s*(.*?)\s*-->$`)
	headingLine = regexp.MustCompile(`^(#{1,6})\s+(.*?)\s*#*\s*$`)
	linkRef     = regexp.MustCompile(`\]\(([^()\s]+)(?:\s+"[^"]*")?\)`)
	codeSpan    = regexp.MustCompile("`[^`]*`")
	mdLink      = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)
)

// parsePage reads a Markdown file: its fenced blocks with their markers,
// its links and its headings' anchors.
func parsePage(t testing.TB, rel string) *page {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root(t), rel))
	if err != nil {
		t.Fatal(err)
	}
	p := &page{path: rel, anchors: map[string]bool{}}
	slugs := map[string]int{}
	var lines []string
	sc := bufio.NewScanner(strings.NewReader(string(data)))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	comment := func(i int) (string, bool) {
		if i < 0 || i >= len(lines) {
			return "", false
		}
		m := commentLine.FindStringSubmatch(strings.TrimSpace(lines[i]))
		if m == nil {
			return "", false
		}
		return m[1], true
	}
	for i := 0; i < len(lines); i++ {
		line := lines[i]
		trimmed := strings.TrimLeft(line, " ")
		if strings.HasPrefix(trimmed, "```") {
			indent := len(line) - len(trimmed)
			b := block{file: rel, line: i + 1}
			if f := strings.Fields(strings.TrimPrefix(trimmed, "```")); len(f) > 0 {
				b.lang = f[0]
			}
			if c, ok := comment(i - 1); ok {
				b.marks = append(b.marks, c)
			}
			var body []string
			j := i + 1
			for ; j < len(lines) && strings.TrimSpace(lines[j]) != "```"; j++ {
				l := lines[j]
				if len(l) >= indent && strings.TrimSpace(l[:indent]) == "" {
					l = l[indent:]
				}
				body = append(body, l)
			}
			if j == len(lines) {
				t.Errorf("%s:%d: code block never closed", rel, i+1)
			}
			if c, ok := comment(j + 1); ok {
				b.marks = append(b.marks, c)
			}
			b.text = strings.Join(body, "\n") + "\n"
			p.blocks = append(p.blocks, b)
			i = j
			continue
		}
		if m := headingLine.FindStringSubmatch(line); m != nil {
			s := slug(m[2])
			if n := slugs[s]; n > 0 {
				p.anchors[s+"-"+strconv.Itoa(n)] = true
			} else {
				p.anchors[s] = true
			}
			slugs[s]++
		}
		for _, m := range linkRef.FindAllStringSubmatch(codeSpan.ReplaceAllString(line, ""), -1) {
			p.links = append(p.links, link{line: i + 1, target: m[1]})
		}
	}
	return p
}

// slug is the anchor GitHub gives a heading: its text lower-cased, links
// reduced to their text, every character but letters, digits, spaces,
// hyphens and underscores dropped, spaces turned into hyphens.
func slug(heading string) string {
	heading = mdLink.ReplaceAllString(heading, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteRune('-')
		}
	}
	return b.String()
}
