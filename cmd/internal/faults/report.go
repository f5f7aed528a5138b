package faults

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/fencegate/fencegate/cmd/internal/worker"
	"github.com/fencegate/fencegate/internal/history"
)

// tokenCheckTimeout bounds porcupine's search on one run's tokens.
const tokenCheckTimeout = time.Minute

// clientIndex maps "c3" to 3 (porcupine's client rows); other names to 0.
func clientIndex(name string) int {
	n, err := strconv.Atoi(strings.TrimPrefix(name, "c"))
	if err != nil {
		return 0
	}
	return n
}

// tokenOperations pairs every token request with its answer. Requests that
// failed are left out: a token minted but never seen constrains nothing.
// Requests that never returned (the client was stopped) are left out too.
func tokenOperations(evs []worker.Event) []history.Op {
	pending := map[string]worker.Event{}
	var ops []history.Op
	for _, e := range evs {
		switch e.Kind {
		case KindTokenCall:
			pending[e.Client] = e
		case KindTokenOK:
			call, ok := pending[e.Client]
			if !ok {
				continue
			}
			delete(pending, e.Client)
			ops = append(ops, history.Op{Client: clientIndex(e.Client), Resource: e.Resource,
				Token: e.Token, Call: call.Time, Return: e.Time})
		case KindTokenFail:
			delete(pending, e.Client)
		}
	}
	return ops
}

// annotations marks the fault windows (on a "nemesis" row) and, on each
// client's row, its pauses and its rejected stale writes.
func annotations(evs []worker.Event) []porcupine.Annotation {
	var out []porcupine.Annotation
	open := map[string]worker.Event{}
	for _, e := range evs {
		switch e.Kind {
		case KindFaultStart:
			open[e.Fault+"/"+e.Target] = e
		case KindFaultEnd:
			s, ok := open[e.Fault+"/"+e.Target]
			if !ok {
				continue
			}
			delete(open, e.Fault+"/"+e.Target)
			desc := e.Fault + " " + e.Target
			out = append(out, porcupine.Annotation{Tag: "nemesis", Start: s.Time, End: e.Time,
				Description: desc, Details: s.Detail, BackgroundColor: "#ffd6d6"})
			if e.Fault == FaultPauseClient {
				out = append(out, porcupine.Annotation{ClientId: clientIndex(e.Target), Start: s.Time, End: e.Time,
					Description: "paused (SIGSTOP)", BackgroundColor: "#ffd6d6"})
			}
		case KindTxnStale:
			out = append(out, porcupine.Annotation{ClientId: clientIndex(e.Client), Start: e.Time,
				Description: fmt.Sprintf("stale write rejected (token %d)", e.Token), Details: e.Err,
				BackgroundColor: "#d6ffd6"})
		}
	}
	return out
}

// CheckTokenOrder is checker (1): porcupine, with the token service's own
// model (history.TokenModelFor), checks that the tokens the clients received
// increase strictly in the real-time order in which they were issued; the
// direct real-time check of package history must agree. It writes
// porcupine's visualization, with the fault windows annotated, to htmlPath
// whatever the verdict, and reports whether the history is linearizable.
func CheckTokenOrder(evs []worker.Event, htmlPath string) (bool, error) {
	ops := tokenOperations(evs)
	model := history.TokenModelFor(ops)
	res, info := porcupine.CheckOperationsVerbose(model, history.Operations(ops), tokenCheckTimeout)
	info.AddAnnotations(annotations(evs))
	if err := porcupine.VisualizePath(model, info, htmlPath); err != nil {
		return false, fmt.Errorf("write token visualization: %w", err)
	}
	direct := history.CheckRealTime(ops) == nil
	return res == porcupine.Ok && direct, nil
}

// writeRunReport writes result.txt: the run's summary line, its failures
// and the faults injected, in Catalog's order.
func writeRunReport(dir string, rep RunReport, state DBState) error {
	r := rep.Result
	var b strings.Builder
	fmt.Fprintf(&b, "runs 1, faults injected %d, double-holds seen %d, stale writes rejected %d, stale writes accepted %d\n",
		r.Faults, r.DoubleHolds, r.StaleRejected, r.StaleAccepted)
	fmt.Fprintf(&b, "seed %d; counter %d; committed increments %d; unknown outcomes %d; porcupine %s\n",
		rep.Seed, state.Counter, r.Committed, r.Unknown, okWord(rep.TokensOK))
	for _, f := range AllFaults {
		if k := rep.Faults[f]; k > 0 {
			fmt.Fprintf(&b, "fault %s x%d\n", f, k)
		}
	}
	for _, f := range r.Failures {
		fmt.Fprintf(&b, "FAIL %s\n", f)
	}
	if err := os.WriteFile(filepath.Join(dir, "result.txt"), []byte(b.String()), 0o644); err != nil {
		return fmt.Errorf("write run report: %w", err)
	}
	return nil
}
