package docgen

import (
	"fmt"
	"html"
	"strings"
	"unicode/utf8"
)

// TerminalSVG draws text as a terminal window showing it after the command
// that printed it, so that a command's real output can be shown as a
// picture that a later run regenerates (hack/docs-pictures.sh).
func TerminalSVG(command, text string) []byte {
	const (
		charW, lineH = 7.8, 17.0
		padX, padTop = 16.0, 44.0
	)
	lines := append([]string{"$ " + command}, strings.Split(strings.TrimRight(strings.ReplaceAll(text, "\t", "    "), "\n"), "\n")...)
	cols := 0
	for _, l := range lines {
		cols = max(cols, utf8.RuneCountInString(l))
	}
	w := int(padX*2 + float64(cols)*charW)
	h := int(padTop + float64(len(lines))*lineH + 12)
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d">`+"\n", w, h, w, h)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" rx="8" fill="#1e2127"/>`+"\n", w, h)
	b.WriteString(`<circle cx="18" cy="16" r="5" fill="#e06c75"/><circle cx="36" cy="16" r="5" fill="#e5c07b"/><circle cx="54" cy="16" r="5" fill="#98c379"/>` + "\n")
	b.WriteString(`<g font-family="DejaVu Sans Mono, Menlo, Consolas, monospace" font-size="13" fill="#d7dae0" xml:space="preserve">` + "\n")
	for i, l := range lines {
		fill := ""
		if i == 0 {
			fill = ` fill="#98c379"`
		}
		fmt.Fprintf(&b, `<text x="%g" y="%g"%s>%s</text>`+"\n", padX, padTop+float64(i)*lineH, fill, html.EscapeString(l))
	}
	b.WriteString("</g>\n</svg>\n")
	return []byte(b.String())
}
