package simulator

import (
	"fmt"
	"html/template"
	"io"
	"math"
	"sort"
	"strings"
)

// palette colours the curves, one per policy, in order.
var palette = [...]string{"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"}

type plotTick struct {
	Pos   float64
	Label string
}

type plotPath struct{ Colour, D string }

// plotPanel is one pair of axes: a range of arrived demand (x) against a
// range of allocation ratio (y), both as fractions, drawn in the box L..R,
// T..B.
type plotPanel struct {
	Title          string
	L, R, T, B     float64
	MidX           float64
	XTicks, YTicks []plotTick
	Paths          []plotPath

	x0, x1, xStep float64
	y0, y1, yStep float64
	// xUnit multiplies x for its tick labels (0 means 100: percent).
	xUnit float64
}

func (p *plotPanel) x(v float64) float64 { return p.L + (v-p.x0)/(p.x1-p.x0)*(p.R-p.L) }
func (p *plotPanel) y(v float64) float64 { return p.B - (v-p.y0)/(p.y1-p.y0)*(p.B-p.T) }

// path draws a curve clipped to the panel's x range; y is clamped to it so
// a curve below the zoomed range runs along the bottom edge.
func (p *plotPanel) path(c []Point) string {
	var b strings.Builder
	cmd := "M"
	for _, pt := range c {
		if pt.ArrivedDemand < p.x0-1e-9 || pt.ArrivedDemand > p.x1+1e-9 {
			continue
		}
		v := math.Min(p.y1, math.Max(p.y0, pt.MilliGPUAllocationRatio))
		fmt.Fprintf(&b, "%s%.1f %.1f ", cmd, p.x(pt.ArrivedDemand), p.y(v))
		cmd = "L"
	}
	return strings.TrimSpace(b.String())
}

type plotLegend struct {
	Name, Colour string
	Y            float64
}

type plotData struct {
	Title              string
	W, H               float64
	Panels             []*plotPanel
	XLabel, YLabel     string
	XLabelX, XLabelY   float64
	YLabelY            float64
	Legend             []plotLegend
	LegendX1, LegendX2 float64
}

const svgTemplate = `<svg xmlns="http://www.w3.org/2000/svg" width="{{.W}}" height="{{.H}}" viewBox="0 0 {{.W}} {{.H}}" font-family="sans-serif" font-size="12">
<rect width="{{.W}}" height="{{.H}}" fill="white"/>
<text x="60" y="20" font-size="14">{{.Title}}</text>
{{range $p := .Panels}}<text x="{{$p.MidX}}" y="{{add $p.T -8}}" text-anchor="middle" fill="#555">{{$p.Title}}</text>
<g stroke="#ddd">{{range $p.XTicks}}<line x1="{{.Pos}}" y1="{{$p.T}}" x2="{{.Pos}}" y2="{{$p.B}}"/>{{end}}{{range $p.YTicks}}<line x1="{{$p.L}}" y1="{{.Pos}}" x2="{{$p.R}}" y2="{{.Pos}}"/>{{end}}</g>
<g stroke="black"><line x1="{{$p.L}}" y1="{{$p.B}}" x2="{{$p.R}}" y2="{{$p.B}}"/><line x1="{{$p.L}}" y1="{{$p.T}}" x2="{{$p.L}}" y2="{{$p.B}}"/></g>
<g text-anchor="middle">{{range $p.XTicks}}<text x="{{.Pos}}" y="{{add $p.B 16}}">{{.Label}}</text>{{end}}</g>
<g text-anchor="end">{{range $p.YTicks}}<text x="{{add $p.L -6}}" y="{{add .Pos 4}}">{{.Label}}</text>{{end}}</g>
{{range $p.Paths}}<path d="{{.D}}" fill="none" stroke="{{.Colour}}" stroke-width="2"/>
{{end}}{{end}}<text x="{{.XLabelX}}" y="{{.XLabelY}}" text-anchor="middle">{{.XLabel}}</text>
<text transform="translate(16 {{.YLabelY}}) rotate(-90)" text-anchor="middle">{{.YLabel}}</text>
{{range .Legend}}<line x1="{{$.LegendX1}}" y1="{{.Y}}" x2="{{$.LegendX2}}" y2="{{.Y}}" stroke="{{.Colour}}" stroke-width="3"/><text x="{{add $.LegendX2 6}}" y="{{add .Y 4}}">{{.Name}}</text>
{{end}}</svg>
`

// WritePlot draws the milli-GPU allocation ratio against arrived demand,
// one curve (the mean over seeds) per policy, as a standalone SVG; the
// legend gives each policy's final ratio. The left
// panel shows the whole run. The right one zooms into its last part, where
// the cluster fills up and the policies part ways; on the full scale their
// curves lie on top of each other.
func WritePlot(w io.Writer, title string, results []*Result) error {
	var policies []string
	seen := map[string]bool{}
	for _, r := range results {
		if !seen[r.Policy] {
			seen[r.Policy] = true
			policies = append(policies, r.Policy)
		}
	}
	curves := make([][]Point, len(policies))
	maxX := 0.0
	for i, p := range policies {
		curves[i] = MeanCurve(results, p)
		for _, pt := range curves[i] {
			maxX = math.Max(maxX, pt.ArrivedDemand)
		}
	}
	maxX = math.Max(0.1, math.Ceil(maxX*10)/10)

	d := plotData{Title: title, W: 1060, H: 460, XLabel: "arrived demand (% of cluster GPU capacity)", YLabel: "GPU allocation ratio (%)"}
	panels := []*plotPanel{{Title: "whole run", L: 60, R: 480, x0: 0, x1: maxX, xStep: 0.1, y0: 0, y1: 1, yStep: 0.1}}
	if zoom := zoomPanel(curves, maxX); zoom != nil {
		zoom.L, zoom.R = 550, 880
		panels = append(panels, zoom)
	}
	for _, p := range panels {
		p.T, p.B = 52, 414
		p.MidX = (p.L + p.R) / 2
		for v := p.x0; v <= p.x1+1e-9; v += p.xStep {
			unit := p.xUnit
			if unit == 0 {
				unit = 100
			}
			p.XTicks = append(p.XTicks, plotTick{Pos: round1(p.x(v)), Label: fmt.Sprintf("%.0f", v*unit)})
		}
		for v := p.y0; v <= p.y1+1e-9; v += p.yStep {
			p.YTicks = append(p.YTicks, plotTick{Pos: round1(p.y(v)), Label: fmt.Sprintf("%.0f", v*100)})
		}
		for i, c := range curves {
			p.Paths = append(p.Paths, plotPath{Colour: palette[i%len(palette)], D: p.path(c)})
		}
	}
	d.Panels = panels
	last := panels[len(panels)-1]
	d.LegendX1, d.LegendX2 = last.R+24, last.R+48
	for i, p := range policies {
		name := p
		if c := curves[i]; len(c) > 0 {
			name = fmt.Sprintf("%s %.2f%%", p, c[len(c)-1].MilliGPUAllocationRatio*100)
		}
		d.Legend = append(d.Legend, plotLegend{Name: name, Colour: palette[i%len(palette)], Y: last.T + 10 + float64(i)*20})
	}
	d.XLabelX, d.XLabelY = (panels[0].L+last.R)/2, d.H-8
	d.YLabelY = (panels[0].T + panels[0].B) / 2

	t, err := template.New("plot").Funcs(template.FuncMap{
		"add": func(a, b float64) float64 { return a + b },
	}).Parse(svgTemplate)
	if err != nil {
		return fmt.Errorf("parsing plot template: %w", err)
	}
	if err := t.Execute(w, d); err != nil {
		return fmt.Errorf("writing plot: %w", err)
	}
	return nil
}

// zoomPanel frames the last 40% of arrived demand (at most) and the band
// of allocation ratios the curves take there, or returns nil when the run
// is too short for a zoom to show anything the whole run does not.
func zoomPanel(curves [][]Point, maxX float64) *plotPanel {
	if maxX < 0.5 {
		return nil
	}
	x0 := math.Max(0, maxX-0.4)
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, c := range curves {
		for _, pt := range c {
			if pt.ArrivedDemand >= x0 {
				lo = math.Min(lo, pt.MilliGPUAllocationRatio)
				hi = math.Max(hi, pt.MilliGPUAllocationRatio)
			}
		}
	}
	if math.IsInf(lo, 0) {
		return nil
	}
	// Round the band out to whole percent steps; the lower curves of a
	// wide spread run along the bottom edge rather than flatten the rest.
	step := 0.01
	if hi-lo > 0.1 {
		step = 0.02
	}
	y1 := math.Min(1, math.Ceil(hi/step)*step+step)
	y0 := math.Max(0, math.Max(math.Floor(lo/step)*step-step, y1-10*step))
	return &plotPanel{Title: "zoom: where the cluster fills up", x0: x0, x1: maxX, xStep: 0.1, y0: y0, y1: y1, yStep: step}
}

func round1(v float64) float64 { return math.Round(v*10) / 10 }

// WriteEventPlot draws the GPU allocation ratio over virtual time in
// hours, one curve per policy (or configuration): at each hour the mean
// over seeds of each run's allocation at its last sample by then.
func WriteEventPlot(w io.Writer, title string, results []*Result) error {
	var policies []string
	by := map[string][]*Result{}
	var maxT int64
	for _, r := range results {
		if r.Event == nil {
			continue
		}
		if _, ok := by[r.Policy]; !ok {
			policies = append(policies, r.Policy)
		}
		by[r.Policy] = append(by[r.Policy], r)
		if u := r.Event.Utilization; len(u) > 0 {
			maxT = max(maxT, u[len(u)-1].Time)
		}
	}
	hours := int(maxT/3600) + 1
	curves := make([][]Point, len(policies))
	var means []float64
	for i, p := range policies {
		var sum float64
		for h := range hours {
			var v float64
			for _, r := range by[p] {
				u := r.Event.Utilization
				k := sort.Search(len(u), func(k int) bool { return u[k].Time > int64(h)*3600 }) - 1
				if k >= 0 {
					v += u[k].MilliGPUAllocationRatio
				}
			}
			v /= float64(len(by[p]))
			sum += v
			curves[i] = append(curves[i], Point{ArrivedDemand: float64(h), MilliGPUAllocationRatio: v})
		}
		means = append(means, sum/float64(max(hours, 1)))
	}
	step := math.Max(1, math.Ceil(float64(hours)/12))
	p := &plotPanel{Title: "GPU allocation over time, mean over seeds", L: 60, R: 760, T: 52, B: 414,
		x0: 0, x1: math.Max(step, math.Ceil(float64(hours)/step)*step), xStep: step, y0: 0, y1: 1, yStep: 0.1, xUnit: 1}
	p.MidX = (p.L + p.R) / 2
	for v := p.x0; v <= p.x1+1e-9; v += p.xStep {
		p.XTicks = append(p.XTicks, plotTick{Pos: round1(p.x(v)), Label: fmt.Sprintf("%.0f", v)})
	}
	for v := p.y0; v <= p.y1+1e-9; v += p.yStep {
		p.YTicks = append(p.YTicks, plotTick{Pos: round1(p.y(v)), Label: fmt.Sprintf("%.0f", v*100)})
	}
	d := plotData{Title: title, W: 1060, H: 460, XLabel: "virtual time (hours)", YLabel: "GPU allocation ratio (%)", Panels: []*plotPanel{p}}
	for i, c := range curves {
		p.Paths = append(p.Paths, plotPath{Colour: palette[i%len(palette)], D: p.path(c)})
		d.Legend = append(d.Legend, plotLegend{Name: fmt.Sprintf("%s, mean %.1f%%", policies[i], 100*means[i]), Colour: palette[i%len(palette)], Y: p.T + 10 + float64(i)*20})
	}
	d.LegendX1, d.LegendX2 = p.R+24, p.R+48
	d.XLabelX, d.XLabelY = (p.L+p.R)/2, d.H-8
	d.YLabelY = (p.T + p.B) / 2
	t, err := template.New("plot").Funcs(template.FuncMap{
		"add": func(a, b float64) float64 { return a + b },
	}).Parse(svgTemplate)
	if err != nil {
		return fmt.Errorf("parsing plot template: %w", err)
	}
	if err := t.Execute(w, d); err != nil {
		return fmt.Errorf("writing plot: %w", err)
	}
	return nil
}
