package lostupdates

import (
	"fmt"
	"io"
	"os"
	"sort"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/cmd/internal/timeline"
)

// modeReport is the analysis of one mode's run.
type modeReport struct {
	Fenced        bool
	Length        time.Duration
	Attempts      int   // increments tried (lock taken, transaction sent)
	Acked         int   // increments the database acknowledged (committed)
	Rejected      int   // increments rejected with FG001 (stale token)
	OtherErrors   int   // increments failed with another SQLSTATE
	Final         int64 // the counter read back
	Logged        int64 // rows in the increments log
	Lost          int64 // Acked - Final: acknowledged increments missing from the counter
	DoubleHolds   int   // acquisitions made while another worker still believed it held the lock
	StaleAccepted int   // committed writes whose token was below one committed before (from the database)
	Traced        int   // rejected increments that left a row anyway (must be 0)
	Pauses        int   // freezes the chaos loop made
	Timeline      *timeline.Timeline
}

// Report is the whole run.
type Report struct {
	cfg   Config
	modes []modeReport
	chart string
}

// ProxySafe reports whether the fenced run, if any, lost nothing: the
// counter equals the accepted increments, the log agrees, no stale write
// landed and every rejection left no trace.
func (r *Report) ProxySafe() bool {
	for _, m := range r.modes {
		if m.Fenced && (m.Lost != 0 || m.Final != int64(m.Acked) || m.Logged != int64(m.Acked) || m.StaleAccepted != 0 || m.Traced != 0) {
			return false
		}
	}
	return true
}

func (r *Report) mode(fenced bool) *modeReport {
	for i := range r.modes {
		if r.modes[i].Fenced == fenced {
			return &r.modes[i]
		}
	}
	return nil
}

func analyze(cfg Config, mr *modeRun) modeReport {
	m := modeReport{Fenced: mr.fenced, Length: mr.end.Sub(mr.start), Final: mr.final, Logged: mr.logged,
		Traced: mr.traced, Pauses: len(mr.pauses)}
	title := "direct to PostgreSQL"
	if mr.fenced {
		title = "through the fencegate proxy, fenced by token"
	}
	tl := timeline.New(title, mr.start)
	for id := 1; id <= cfg.Workers; id++ {
		tl.AddLane(lane(id))
	}
	recs := append([]workerRecord(nil), mr.records...)
	sort.SliceStable(recs, func(i, j int) bool { return recs[i].Time < recs[j].Time })

	// Holds: from "acq" to the worker's next "rel".
	type hold struct {
		worker   int
		from, to int64
		token    int64
	}
	open := map[int]*hold{}
	var holds []hold
	for _, r := range recs {
		switch r.Kind {
		case "acq":
			open[r.worker] = &hold{worker: r.worker, from: r.Time, token: r.Token}
		case "rel":
			if h := open[r.worker]; h != nil {
				h.to = r.Time
				holds = append(holds, *h)
				delete(open, r.worker)
			}
		case "write":
			m.Attempts++
			at := time.Unix(0, r.Time)
			switch {
			case r.OK:
				m.Acked++
				kind := timeline.Accepted
				if mr.stale[[2]int{r.worker, r.Attempt}] {
					m.StaleAccepted++
					kind = timeline.Stale
				}
				label := ""
				if kind == timeline.Stale {
					label = fmt.Sprintf("token %d, stale", r.Token)
				}
				tl.Mark(lane(r.worker), kind, at, label)
			case r.SQLState == fencegate.CodeStaleToken:
				m.Rejected++
				tl.Mark(lane(r.worker), timeline.Rejected, at, fmt.Sprintf("token %d rejected", r.Token))
			default:
				m.OtherErrors++
				tl.Mark(lane(r.worker), timeline.Note, at, fmt.Sprintf("token %d: %s %s", r.Token, r.SQLState, r.Err))
			}
		}
	}
	for _, h := range open {
		h.to = mr.end.UnixNano()
		holds = append(holds, *h)
	}
	sort.Slice(holds, func(i, j int) bool { return holds[i].from < holds[j].from })
	var active []hold
	for _, h := range holds {
		kept := active[:0]
		for _, a := range active {
			if a.to > h.from {
				kept = append(kept, a)
			}
		}
		active = kept
		if len(active) > 0 {
			m.DoubleHolds++
		}
		active = append(active, h)
		tl.Span(lane(h.worker), timeline.Hold, time.Unix(0, h.from), time.Unix(0, h.to), fmt.Sprintf("%d", h.token))
	}
	for _, p := range mr.pauses {
		tl.Span(lane(p.worker), timeline.Pause, p.from, p.to, "")
	}
	tl.Extend(mr.end)
	m.Lost = int64(m.Acked) - m.Final
	tl.SetCaption(fmt.Sprintf("%d increments acknowledged, counter %d: %d lost; %d double-holds, %d stale writes landed, %d rejected (FG001)",
		m.Acked, m.Final, m.Lost, m.DoubleHolds, m.StaleAccepted, m.Rejected))
	m.Timeline = tl
	return m
}

func lane(id int) string { return fmt.Sprintf("worker %d", id) }

func (r *Report) writeChart(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("write chart: %w", err)
	}
	var tls []*timeline.Timeline
	for _, m := range r.modes {
		tls = append(tls, m.Timeline)
	}
	title := fmt.Sprintf("Lock holders over time: %d workers, TTL %v, seed %d", r.cfg.Workers, r.cfg.TTL, r.cfg.Seed)
	if err := timeline.WriteSVG(f, title, tls...); err != nil {
		f.Close()
		return fmt.Errorf("write chart: %w", err)
	}
	return f.Close()
}

func (r *Report) print(w io.Writer) {
	cols := []*modeReport{r.mode(false), r.mode(true)}
	fmt.Fprintf(w, "%-40s %12s %12s\n", "", "direct", "proxy")
	row := func(name string, f func(*modeReport) string) {
		v := [2]string{"-", "-"}
		for i, m := range cols {
			if m != nil {
				v[i] = f(m)
			}
		}
		fmt.Fprintf(w, "%-40s %12s %12s\n", name, v[0], v[1])
	}
	n := func(f func(*modeReport) int64) func(*modeReport) string {
		return func(m *modeReport) string { return fmt.Sprint(f(m)) }
	}
	row("run length", func(m *modeReport) string { return m.Length.Round(10 * time.Millisecond).String() })
	row("freezes injected (SIGSTOP past the TTL)", n(func(m *modeReport) int64 { return int64(m.Pauses) }))
	row("double-holds (grant while another held)", n(func(m *modeReport) int64 { return int64(m.DoubleHolds) }))
	row("increments attempted", n(func(m *modeReport) int64 { return int64(m.Attempts) }))
	row("increments acknowledged", n(func(m *modeReport) int64 { return int64(m.Acked) }))
	row("final counter", n(func(m *modeReport) int64 { return m.Final }))
	row("LOST UPDATES (acknowledged - counter)", n(func(m *modeReport) int64 { return m.Lost }))
	row("stale writes landed", n(func(m *modeReport) int64 { return int64(m.StaleAccepted) }))
	row("stale writes rejected (FG001)", n(func(m *modeReport) int64 { return int64(m.Rejected) }))
	row("rejected writes that left a trace", n(func(m *modeReport) int64 { return int64(m.Traced) }))
	fmt.Fprintln(w)
	if p := r.mode(true); p != nil {
		if r.ProxySafe() {
			fmt.Fprintf(w, "through the proxy: counter %d = %d accepted increments; all %d rejected ones left no trace.\n", p.Final, p.Acked, p.Rejected)
		} else {
			fmt.Fprintf(w, "through the proxy: UPDATES LOST (counter %d, accepted %d, log %d, stale landed %d, traces %d)\n",
				p.Final, p.Acked, p.Logged, p.StaleAccepted, p.Traced)
		}
	}
	if d := r.mode(false); d != nil && d.Lost > 0 {
		fmt.Fprintf(w, "direct: %d of %d acknowledged increments were silently lost.\n", d.Lost, d.Acked)
	}
	fmt.Fprintf(w, "chart: %s\n", r.chart)
	fmt.Fprintf(w, "seed: %d\n", r.cfg.Seed)
}
