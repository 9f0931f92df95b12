package simulator

import (
	"fmt"
	"html/template"
	"io"
	"math"
	"strings"
)

// palette colours the curves, one per policy, in order.
var palette = [...]string{"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"}

type plotSeries struct {
	Name, Colour, Path string
	LegendY            float64
}

type plotTick struct {
	Pos   float64
	Label string
}

type plotData struct {
	Title                      string
	W, H, L, R, T, B           float64
	PlotW, PlotH               float64
	XTicks, YTicks             []plotTick
	Series                     []plotSeries
	XLabel, YLabel, LegendX    string
	LegendLineX1, LegendLineX2 float64
}

const svgTemplate = `<svg xmlns="http://www.w3.org/2000/svg" width="{{.W}}" height="{{.H}}" viewBox="0 0 {{.W}} {{.H}}" font-family="sans-serif" font-size="12">
<rect width="{{.W}}" height="{{.H}}" fill="white"/>
<text x="{{.L}}" y="20" font-size="14">{{.Title}}</text>
<g stroke="#ddd">{{range .XTicks}}<line x1="{{.Pos}}" y1="{{$.T}}" x2="{{.Pos}}" y2="{{$.B}}"/>{{end}}{{range .YTicks}}<line x1="{{$.L}}" y1="{{.Pos}}" x2="{{$.R}}" y2="{{.Pos}}"/>{{end}}</g>
<g stroke="black"><line x1="{{.L}}" y1="{{.B}}" x2="{{.R}}" y2="{{.B}}"/><line x1="{{.L}}" y1="{{.T}}" x2="{{.L}}" y2="{{.B}}"/></g>
<g text-anchor="middle">{{range .XTicks}}<text x="{{.Pos}}" y="{{$.B | add 16}}">{{.Label}}</text>{{end}}</g>
<g text-anchor="end">{{range .YTicks}}<text x="{{$.L | add -6}}" y="{{.Pos | add 4}}">{{.Label}}</text>{{end}}</g>
<text x="{{.L | add (half .PlotW)}}" y="{{.H | add -8}}" text-anchor="middle">{{.XLabel}}</text>
<text transform="translate(16 {{.T | add (half .PlotH)}}) rotate(-90)" text-anchor="middle">{{.YLabel}}</text>
{{range .Series}}<path d="{{.Path}}" fill="none" stroke="{{.Colour}}" stroke-width="2"/>
<line x1="{{$.LegendLineX1}}" y1="{{.LegendY}}" x2="{{$.LegendLineX2}}" y2="{{.LegendY}}" stroke="{{.Colour}}" stroke-width="3"/><text x="{{$.LegendLineX2 | add 6}}" y="{{.LegendY | add 4}}">{{.Name}}</text>
{{end}}</svg>
`

// WritePlot draws the milli-GPU allocation ratio against arrived demand,
// one curve (the mean over seeds) per policy, as a standalone SVG.
func WritePlot(w io.Writer, title string, results []*Result) error {
	var policies []string
	seen := map[string]bool{}
	for _, r := range results {
		if !seen[r.Policy] {
			seen[r.Policy] = true
			policies = append(policies, r.Policy)
		}
	}
	d := plotData{Title: title, W: 760, H: 460, L: 60, T: 36, XLabel: "arrived demand (% of cluster GPU capacity)", YLabel: "GPU allocation ratio (%)"}
	d.R, d.B = d.W-170, d.H-46
	d.PlotW, d.PlotH = d.R-d.L, d.B-d.T
	maxX := 0.0
	for _, r := range results {
		for _, p := range r.Curve {
			maxX = math.Max(maxX, p.ArrivedDemand)
		}
	}
	maxX = math.Max(0.1, math.Ceil(maxX*10)/10)
	x := func(v float64) float64 { return d.L + v/maxX*d.PlotW }
	y := func(v float64) float64 { return d.B - v*d.PlotH }
	for v := 0.0; v <= maxX+1e-9; v += 0.1 {
		d.XTicks = append(d.XTicks, plotTick{Pos: round1(x(v)), Label: fmt.Sprintf("%.0f", v*100)})
	}
	for v := 0.0; v <= 1+1e-9; v += 0.1 {
		d.YTicks = append(d.YTicks, plotTick{Pos: round1(y(v)), Label: fmt.Sprintf("%.0f", v*100)})
	}
	d.LegendLineX1, d.LegendLineX2 = d.R+14, d.R+38
	for i, p := range policies {
		var b strings.Builder
		for k, pt := range MeanCurve(results, p) {
			cmd := "L"
			if k == 0 {
				cmd = "M"
			}
			fmt.Fprintf(&b, "%s%.1f %.1f ", cmd, x(pt.ArrivedDemand), y(pt.MilliGPUAllocationRatio))
		}
		d.Series = append(d.Series, plotSeries{Name: p, Colour: palette[i%len(palette)], Path: strings.TrimSpace(b.String()), LegendY: d.T + 10 + float64(i)*20})
	}
	t, err := template.New("plot").Funcs(template.FuncMap{
		"add":  func(a, b float64) float64 { return a + b },
		"half": func(a float64) float64 { return a / 2 },
	}).Parse(svgTemplate)
	if err != nil {
		return fmt.Errorf("parsing plot template: %w", err)
	}
	if err := t.Execute(w, d); err != nil {
		return fmt.Errorf("writing plot: %w", err)
	}
	return nil
}

func round1(v float64) float64 { return math.Round(v*10) / 10 }
