//go:build integration

package main

import (
	"fmt"
	"image/color"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

var groupColors = map[string]color.Color{
	"limit":    color.RGBA{R: 140, G: 140, B: 140, A: 255},
	"alos":     color.RGBA{R: 120, G: 170, B: 220, A: 255},
	"eos":      color.RGBA{R: 30, G: 90, B: 180, A: 255},
	"kstreams": color.RGBA{R: 230, G: 130, B: 40, A: 255},
	"windowed": color.RGBA{R: 110, G: 60, B: 170, A: 255},
	"join":     color.RGBA{R: 200, G: 60, B: 120, A: 255},
	"sink":     color.RGBA{R: 60, G: 160, B: 90, A: 255},
}

var groupLegend = []struct{ group, label string }{
	{"limit", "broker limit"}, {"alos", "exactly at-least-once"}, {"eos", "exactly exactly-once"},
	{"kstreams", "Kafka Streams exactly_once_v2"}, {"windowed", "exactly windowed count"},
	{"join", "exactly join"}, {"sink", "Postgres"},
}

// plot draws every measured case as a horizontal bar of records/s, the
// first case at the top, with the latency and the ratios in the title.
func (r *report) plot(path string) error {
	var cases []caseResult
	for i := len(r.Cases) - 1; i >= 0; i-- {
		if c := r.Cases[i]; c.Error == "" && c.RecordsPerS > 0 {
			cases = append(cases, c)
		}
	}
	if len(cases) == 0 {
		return fmt.Errorf("nothing measured")
	}
	p := plot.New()
	title := []string{fmt.Sprintf("exactly bench, %s: %d cores, %v x 1 KiB JSON, %v partitions, commit %s",
		r.Started.Format("2006-01-02"), r.Machine.Cores, r.Params["records"], r.Params["partitions"], commitInterval)}
	var rs []string
	for _, x := range r.Ratios {
		rs = append(rs, fmt.Sprintf("%s %.2f", x.Name, x.Value))
	}
	for i := 0; i < len(rs); i += 3 {
		title = append(title, strings.Join(rs[i:min(i+3, len(rs))], " | "))
	}
	for _, l := range r.Latency {
		if l.Received > 0 {
			title = append(title, fmt.Sprintf("latency, %s at %d records/s (%d%% load): p50 %.0f ms, p99 %.0f ms, max %.0f ms",
				l.Case, l.TargetRate, l.LoadPct, l.P50ms, l.P99ms, l.MaxMs))
		}
	}
	p.Title.Text = strings.Join(title, "\n")
	p.Title.TextStyle.Font.Size = vg.Points(9)
	p.X.Label.Text = "records/s (steady state; bar labels: records/s, peak RSS)"
	p.X.Min = 0

	names := make([]string, len(cases))
	var labels plotter.XYLabels
	maxRate := 0.0
	for i, c := range cases {
		names[i] = c.Name
		maxRate = max(maxRate, c.RecordsPerS)
		l := fmt.Sprintf(" %.0f", c.RecordsPerS)
		if c.PeakRSSMiB > 0 {
			l += fmt.Sprintf(", %.0f MiB", c.PeakRSSMiB)
		}
		labels.XYs = append(labels.XYs, plotter.XY{X: c.RecordsPerS, Y: float64(i)})
		labels.Labels = append(labels.Labels, l)
	}
	p.X.Max = maxRate * 1.3
	for _, g := range groupLegend {
		vals := make(plotter.Values, len(cases))
		found := false
		for i, c := range cases {
			if c.Group == g.group {
				vals[i], found = c.RecordsPerS, true
			}
		}
		if !found {
			continue
		}
		bars, err := plotter.NewBarChart(vals, vg.Points(14))
		if err != nil {
			return err
		}
		bars.Horizontal = true
		bars.Color = groupColors[g.group]
		bars.LineStyle.Width = 0
		p.Add(bars)
		p.Legend.Add(g.label, bars)
	}
	lab, err := plotter.NewLabels(labels)
	if err != nil {
		return err
	}
	for i := range lab.TextStyle {
		lab.TextStyle[i].Font.Size = vg.Points(8)
		lab.TextStyle[i].YAlign = draw.YCenter
	}
	p.Add(lab)
	p.NominalY(names...)
	p.Legend.Top = false
	p.Legend.Left = false
	p.Legend.XOffs = -vg.Points(4)
	p.Legend.TextStyle.Font.Size = vg.Points(8)
	return p.Save(11*vg.Inch, vg.Points(float64(150+22*len(cases)+16*len(title))), path)
}
