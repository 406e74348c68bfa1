package report

import (
	"fmt"
	"image/color"
	"math"
	"os"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/quorate/quorate/bench"
)

// Plot writes a PNG of c to path: on top, each target's latency by
// percentile, with the x axis in "nines" (90%, 99%, 99.9%, ...) so the tail
// gets as much room as the median; below, each target's checks per second
// over the measured time (rounds laid end to end).
func Plot(path string, c *bench.Comparison) error {
	lat, err := latencyPlot(c)
	if err != nil {
		return err
	}
	thr, err := throughputPlot(c)
	if err != nil {
		return err
	}
	img := vgimg.New(10*vg.Inch, 8*vg.Inch)
	dc := draw.New(img)
	// White, not transparent: the plot is viewed in image viewers and
	// pasted into dark-themed pages.
	dc.SetColor(color.White)
	dc.Fill(dc.Rectangle.Path())
	tiles := draw.Tiles{Rows: 2, Cols: 1, PadTop: vg.Points(10), PadBottom: vg.Points(10),
		PadLeft: vg.Points(10), PadRight: vg.Points(20), PadY: vg.Points(25)}
	cs := plot.Align([][]*plot.Plot{{lat}, {thr}}, tiles, dc)
	lat.Draw(cs[0][0])
	thr.Draw(cs[1][0])
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("report: %w", err)
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return fmt.Errorf("report: writing %s: %w", path, err)
	}
	return f.Close()
}

// nines maps a percentile to the plot's x axis: 0% → 0, 90% → 1, 99% → 2.
func nines(p float64) float64 { return -math.Log10(1 - p/100) }

func latencyPlot(c *bench.Comparison) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = c.Scenario + ": latency by percentile"
	if len(c.Runs) > 0 && c.Runs[0].Rate > 0 {
		p.Title.Text += " (open loop, from scheduled send time)"
	}
	p.X.Label.Text = "percentile"
	p.Y.Label.Text = "latency (ms)"
	p.Legend.Top, p.Legend.Left = true, true
	maxX := 3.0
	for i, r := range c.Runs {
		var xys plotter.XYs
		for _, pt := range r.LatencyCurve {
			x := 0.0
			if pt.Percentile >= 100 {
				// The maximum has no finite place on a nines axis: put it a
				// quarter decade past the last percentile.
				if len(xys) > 0 {
					x = xys[len(xys)-1].X + 0.25
				}
			} else {
				x = nines(pt.Percentile)
			}
			xys = append(xys, plotter.XY{X: x, Y: pt.MS})
		}
		if len(xys) == 0 {
			continue
		}
		maxX = max(maxX, xys[len(xys)-1].X)
		if err := addLine(p, i, label(r), xys); err != nil {
			return nil, err
		}
	}
	var ticks []plot.Tick
	for n := 0; float64(n) <= maxX; n++ {
		ticks = append(ticks, plot.Tick{Value: float64(n), Label: fmt.Sprintf("%g%%", 100*(1-math.Pow(10, -float64(n))))})
	}
	p.X.Tick.Marker = plot.ConstantTicks(ticks)
	p.X.Min, p.X.Max = 0, maxX
	p.Y.Min = 0
	p.Add(plotter.NewGrid())
	return p, nil
}

func throughputPlot(c *bench.Comparison) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = c.Scenario + ": throughput over time"
	p.X.Label.Text = "time (s)"
	p.Y.Label.Text = "checks/s"
	// Bottom left: throughput lines run high, and start after x=0.
	p.Legend.Left = true
	for i, r := range c.Runs {
		var xys plotter.XYs
		at := 0.0
		for _, t := range r.Throughput {
			// A point per tick at its middle. A round's last tick is cut
			// short by the end of the round: its rate over a sliver of a
			// second is mostly noise, so only ticks of a quarter second or
			// more are drawn.
			if t.Seconds >= 0.25 {
				xys = append(xys, plotter.XY{X: at + t.Seconds/2, Y: float64(t.Checks) / t.Seconds})
			}
			at += max(t.Seconds, 0)
		}
		if len(xys) == 0 {
			continue
		}
		if err := addLine(p, i, label(r), xys); err != nil {
			return nil, err
		}
	}
	p.Y.Min = 0
	p.Add(plotter.NewGrid())
	return p, nil
}

func addLine(p *plot.Plot, i int, name string, xys plotter.XYs) error {
	l, err := plotter.NewLine(xys)
	if err != nil {
		return fmt.Errorf("report: %w", err)
	}
	l.Color = plotutil.Color(i)
	l.Width = vg.Points(1.5)
	p.Add(l)
	p.Legend.Add(name, l)
	return nil
}

func label(r *bench.RunResult) string {
	return fmt.Sprintf("%s %s (p50 %s ms, p99 %s ms)", r.Target, r.Mode, millis(r.LatencyMS.P50), millis(r.LatencyMS.P99))
}
