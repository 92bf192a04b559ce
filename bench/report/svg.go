package report

import (
	"fmt"
	"html"
	"io"
	"strings"

	"github.com/okiba/okiba/bench/harness"
)

// panel is one small bar chart: one bar per system.
type panel struct {
	title string
	unit  string
	bars  []bar
}

type bar struct {
	system string
	dur    harness.Durability
	okiba  bool
	value  float64
	lo, hi float64 // spread, 0 when none
	label  string
}

// SVG writes the chart: one panel per headline cell (all cells of a small run),
// horizontal bars of the median msg/s with the min–max spread as a whisker, okiba in
// blue, durable peers in grey, relaxed ones hatched orange, the limit in green; and a
// panel of single-publisher ack latency.
func SVG(w io.Writer, run *harness.Run) {
	t := Aggregate(run)
	var panels []panel
	total := 0
	for _, s := range []string{"s1", "s2", "s3", "s4", "s8"} {
		total += len(t.Cells[s])
	}
	for _, s := range []string{"s1", "s2", "s3", "s4", "s8"} {
		for _, c := range t.Cells[s] {
			if total > 14 && !headline(c) {
				continue
			}
			p := panel{title: fmt.Sprintf("%s %s — %s", strings.ToUpper(s), c.Name, harness.ScenarioTitle(s)), unit: "msg/s"}
			for _, sys := range t.Systems {
				a := t.Get(s, c.Name, sys.Name)
				if a == nil || a.Rate == 0 {
					continue
				}
				p.bars = append(p.bars, bar{system: sys.Name, dur: sys.Durability, okiba: sys.Peer == "okiba",
					value: a.Rate, lo: a.Min, hi: a.Max, label: rate(a.Rate)})
			}
			if len(p.bars) > 0 {
				panels = append(panels, p)
			}
		}
	}
	for _, c := range t.Cells["s1"] {
		p := panel{title: "S1 " + c.Name + " — ack latency p50 (bar) and p99 (whisker)", unit: "ms"}
		for _, sys := range t.Systems {
			a := t.Get("s1", c.Name, sys.Name)
			if a == nil || a.Rate == 0 {
				continue
			}
			p50, p99 := a.MedLat(false, latP50), a.MedLat(false, latP99)
			p.bars = append(p.bars, bar{system: sys.Name, dur: sys.Durability, okiba: sys.Peer == "okiba",
				value: p50, lo: p50, hi: p99, label: fmt.Sprintf("%s / %s", ms(p50), ms(p99))})
		}
		if len(p.bars) > 0 {
			panels = append(panels, p)
		}
	}
	draw(w, panels, run)
}

// headline picks the cells a big run's chart shows: the load shapes the performance
// targets of docs/benchmarks.md quote.
func headline(c harness.Cell) bool {
	switch c.Scenario {
	case "s1", "s8":
		return true
	case "s2":
		return (c.Producers == 16 && c.Window == 64) || (c.Producers == 64 && c.Window == 512)
	case "s3":
		return c.Consumers == 4 && !c.AckEach
	case "s4":
		return c.LoadFrac == 0.5
	}
	return false
}

func draw(w io.Writer, panels []panel, run *harness.Run) {
	const (
		width  = 900
		left   = 170
		right  = 150
		barH   = 14
		gap    = 4
		titleH = 26
		padB   = 14
	)
	height := 60
	for _, p := range panels {
		height += titleH + len(p.bars)*(barH+gap) + padB
	}
	fmt.Fprintf(w, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="11">`+"\n", width, height, width, height)
	fmt.Fprintf(w, `<defs><pattern id="hatch" width="6" height="6" patternUnits="userSpaceOnUse" patternTransform="rotate(45)"><rect width="6" height="6" fill="#f6c28b"/><line x1="0" y1="0" x2="0" y2="6" stroke="#d9822b" stroke-width="3"/></pattern></defs>`+"\n")
	fmt.Fprintf(w, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(w, `<text x="10" y="20" font-size="14" font-weight="bold">okiba side by side — %s, %s (%s)</text>`+"\n",
		html.EscapeString(run.Machine.Host), run.Started.Format("2006-01-02 15:04"), html.EscapeString(run.Mode))
	fmt.Fprintf(w, `<text x="10" y="38" fill="#444">blue: okiba · grey: durable peers · hatched orange: relaxed (ack before fsync) · green: in-process log limit · whiskers: min–max over repeats</text>`+"\n")
	y := 60
	plotW := float64(width - left - right)
	for _, p := range panels {
		fmt.Fprintf(w, `<text x="10" y="%d" font-weight="bold">%s</text>`+"\n", y+16, html.EscapeString(p.title))
		y += titleH
		maxV := 0.0
		for _, b := range p.bars {
			maxV = max(maxV, b.value, b.hi)
		}
		if maxV == 0 {
			maxV = 1
		}
		for _, b := range p.bars {
			fill := "#9aa5b1"
			switch {
			case b.okiba:
				fill = "#1f5fbf"
			case b.dur == harness.Relaxed:
				fill = "url(#hatch)"
			case b.dur == harness.Limit:
				fill = "#3a9d5d"
			}
			bw := b.value / maxV * plotW
			fmt.Fprintf(w, `<text x="%d" y="%d" text-anchor="end">%s</text>`+"\n", left-6, y+barH-3, html.EscapeString(b.system))
			fmt.Fprintf(w, `<rect x="%d" y="%d" width="%.1f" height="%d" fill="%s"/>`+"\n", left, y, bw, barH, fill)
			if b.hi > b.lo && b.hi > 0 {
				x1, x2 := float64(left)+b.lo/maxV*plotW, float64(left)+b.hi/maxV*plotW
				cy := y + barH/2
				fmt.Fprintf(w, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#222"/><line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#222"/><line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#222"/>`+"\n",
					x1, cy, x2, cy, x1, cy-3, x1, cy+3, x2, cy-3, x2, cy+3)
			}
			lx := float64(left) + max(bw, b.hi/maxV*plotW) + 6
			fmt.Fprintf(w, `<text x="%.1f" y="%d">%s</text>`+"\n", lx, y+barH-3, html.EscapeString(b.label))
			y += barH + gap
		}
		y += padB
	}
	fmt.Fprintln(w, "</svg>")
}
