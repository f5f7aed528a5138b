package faults

import (
	"fmt"
	"sort"

	"github.com/fencegate/fencegate/cmd/internal/worker"
)

// Row is one committed increment as the database holds it: the workload's
// transaction inserts it together with the counter update, so the table is
// the ground truth of what was accepted.
type Row struct {
	Client string
	Op     int64
	Token  int64
	// Prev is the counter value the transaction read (and replaced by
	// Prev+1). Fenced transactions on the resource are serialized, so the
	// rows ordered by Prev are the commit order.
	Prev int64
}

// DBState is what the checkers read from the database after a run.
type DBState struct {
	Counter int64
	Rows    []Row
	// Effects are the effects the clients' transactions recorded, after
	// the relay had up to 30s to deliver them; Charges the Idempotency-Key
	// of every charge the provider made, in order.
	Effects []EffectRow
	Charges []string
}

// EffectRow is one effect as the database holds it.
type EffectRow struct {
	Client string
	Op     int64
	Key    string
	State  string
}

// Result is the verdict of the checkers on one run.
type Result struct {
	Faults        int // faults the nemesis injected
	DoubleHolds   int // pairs of clients that believed they held the lock at once
	StaleRejected int // transactions rejected by the fence (FG001)
	StaleAccepted int // committed writes whose token is below an earlier committed one
	Committed     int // rows in the database
	Unknown       int // transactions whose outcome the client could not know
	Effects       int // effects committed (one per committed increment)
	TokenOps      int // token operations checked for real-time order
	// Failures lists every violated property, one line each. Empty means
	// the run passed.
	Failures []string
}

// OK reports whether every check passed.
func (r *Result) OK() bool { return len(r.Failures) == 0 }

func (r *Result) failf(format string, args ...any) {
	r.Failures = append(r.Failures, fmt.Sprintf(format, args...))
}

type opKey struct {
	client string
	op     int64
}

// Check runs checkers (2), (3) and (4) and the stale-write count on a run's
// history and final database state. Checker (1), the porcupine check of the
// tokens, is CheckTokenOrder.
func Check(evs []worker.Event, db DBState) Result {
	var r Result
	calls := map[opKey]worker.Event{}
	oks := map[opKey]worker.Event{}
	unknown := map[opKey]bool{}
	rejected := map[opKey]worker.Event{}
	for _, e := range evs {
		k := opKey{e.Client, e.Op}
		switch e.Kind {
		case KindFaultStart:
			r.Faults++
		case KindTxnCall:
			calls[k] = e
		case KindTxnOK:
			oks[k] = e
		case KindTxnStale:
			rejected[k] = e
			r.StaleRejected++
		case KindTxnFail:
			if e.Detail == DetailAborted {
				rejected[k] = e
			} else {
				unknown[k] = true
			}
		}
	}
	// A transaction that was called and never returned (its client was
	// killed or the run ended) has an unknown outcome too.
	for k := range calls {
		if _, ok := oks[k]; !ok {
			if _, ok := rejected[k]; !ok {
				unknown[k] = true
			}
		}
	}
	r.Unknown = len(unknown)
	r.Committed = len(db.Rows)

	checkData(&r, db, calls, oks, unknown)
	checkNoTrace(&r, db, rejected)
	checkStale(&r, db)
	checkEffects(&r, db)
	checkFloor(&r, evs, calls, oks)
	checkAfterWipes(&r, evs)
	r.DoubleHolds = countDoubleHolds(evs)
	if r.DoubleHolds == 0 {
		r.failf("no double hold of the lock: the faults did not bite")
	}
	return r
}

// checkData is checker (2): counter = committed increments, each increment
// read the value the previous one wrote (no lost update), every
// acknowledged increment is there and nothing is there that no client sent.
func checkData(r *Result, db DBState, calls, oks map[opKey]worker.Event, unknown map[opKey]bool) {
	if db.Counter != int64(len(db.Rows)) {
		r.failf("data: counter = %d but %d increments committed", db.Counter, len(db.Rows))
	}
	byPrev := map[int64]Row{}
	rows := map[opKey]Row{}
	for _, row := range db.Rows {
		if other, dup := byPrev[row.Prev]; dup {
			r.failf("data: lost update: %s/%d and %s/%d both read %d", other.Client, other.Op, row.Client, row.Op, row.Prev)
		}
		byPrev[row.Prev] = row
		rows[opKey{row.Client, row.Op}] = row
		if _, ok := calls[opKey{row.Client, row.Op}]; !ok {
			r.failf("data: committed row %s/%d matches no transaction in the history", row.Client, row.Op)
		}
	}
	for k, e := range oks {
		row, ok := rows[k]
		if !ok {
			r.failf("data: acknowledged increment %s/%d (token %d) is not in the database", k.client, k.op, e.Token)
			continue
		}
		if row.Token != e.Token || row.Prev != e.Value {
			r.failf("data: %s/%d acknowledged token %d prev %d, database has token %d prev %d",
				k.client, k.op, e.Token, e.Value, row.Token, row.Prev)
		}
	}
	if n := len(db.Rows); n < len(oks) || n > len(oks)+len(unknown) {
		r.failf("data: %d rows committed, but %d acknowledged and %d unknown", n, len(oks), len(unknown))
	}
}

// checkNoTrace is checker (3): a rejected transaction committed nothing.
func checkNoTrace(r *Result, db DBState, rejected map[opKey]worker.Event) {
	for _, row := range db.Rows {
		if e, ok := rejected[opKey{row.Client, row.Op}]; ok {
			r.failf("trace: transaction %s/%d was rejected (%s %s) but its row is committed", row.Client, row.Op, e.Kind, e.Err)
		}
	}
}

// checkStale counts committed writes whose token is below the token of a
// write committed before them: the stale writes fencing exists to stop.
func checkStale(r *Result, db DBState) {
	rows := append([]Row(nil), db.Rows...)
	sort.Slice(rows, func(i, j int) bool { return rows[i].Prev < rows[j].Prev })
	var max int64
	var maxRow Row
	for _, row := range rows {
		if row.Token < max {
			r.StaleAccepted++
			r.failf("stale: %s/%d committed token %d after %s/%d committed token %d",
				row.Client, row.Op, row.Token, maxRow.Client, maxRow.Op, max)
		}
		if row.Token > max {
			max, maxRow = row.Token, row
		}
	}
}

// checkFloor requires every transaction called after a prune of the marks
// ended (FaultPruneMarks, the floor in the event's Value) and committed to
// carry a token above that floor: once the floor is raised, no holder at
// or below it may write, whether its resource still has a mark or not.
func checkFloor(r *Result, evs []worker.Event, calls, oks map[opKey]worker.Event) {
	type prune struct {
		at    int64
		floor int64
	}
	var prunes []prune
	for _, e := range evs {
		if e.Kind == KindFaultEnd && e.Fault == FaultPruneMarks && e.Value > 0 {
			prunes = append(prunes, prune{e.Time, e.Value})
		}
	}
	if len(prunes) == 0 {
		return
	}
	for k, ok := range oks {
		call, found := calls[k]
		if !found {
			continue
		}
		var floor int64
		for _, p := range prunes {
			if p.at < call.Time && p.floor > floor {
				floor = p.floor
			}
		}
		if ok.Token <= floor {
			r.StaleAccepted++
			r.failf("floor: %s/%d committed token %d, called after the marks were pruned to floor %d", k.client, k.op, ok.Token, floor)
		}
	}
}

// checkAfterWipes requires every token asked for after a token node lost
// (or had replaced) its data directory to be above every token handed out
// before: the lost disk must not restart the counter. (Porcupine checks
// this too, among every other pair of operations; this check names the
// wipe when it fails.)
func checkAfterWipes(r *Result, evs []worker.Event) {
	// A client asks for one token at a time, and may ask several times in
	// one operation (the lock client retries): each answer belongs to the
	// client's latest call before it.
	calledAt := map[int]int64{} // index of a token-ok event -> time of its call
	pending := map[string]int64{}
	for i, e := range evs {
		switch e.Kind {
		case KindTokenCall:
			pending[e.Client] = e.Time
		case KindTokenOK:
			if at, ok := pending[e.Client]; ok {
				calledAt[i] = at
			}
		}
	}
	for _, w := range evs {
		if w.Kind != KindFaultStart || (w.Fault != FaultWipeNode && w.Fault != FaultReplaceNode && w.Fault != FaultRestoreCopy) {
			continue
		}
		var before int64
		for _, e := range evs {
			if e.Kind == KindTokenOK && e.Time < w.Time {
				before = max(before, e.Token)
			}
		}
		for i, e := range evs {
			if e.Kind != KindTokenOK {
				continue
			}
			if at, ok := calledAt[i]; ok && at > w.Time && e.Token <= before {
				r.failf("wipe: %s/%d got token %d after %s of %s began, not above %d handed out before it", e.Client, e.Op, e.Token, w.Fault, w.Target, before)
			}
		}
	}
}

// Hold is the time a client believed it held the lock: from the grant until
// it released (or gave up) after its transaction, or the end of the history.
type Hold struct {
	Client     string
	Op         int64
	Token      int64
	Start, End int64
}

// Holds returns every lock hold of the history.
func Holds(evs []worker.Event) []Hold {
	open := map[string]*Hold{}
	var out []Hold
	var last int64
	for _, e := range evs {
		last = e.Time
		switch e.Kind {
		case KindAcquireOK:
			open[e.Client] = &Hold{Client: e.Client, Op: e.Op, Token: e.Token, Start: e.Time}
		case KindRelease:
			if h := open[e.Client]; h != nil {
				h.End = e.Time
				out = append(out, *h)
				delete(open, e.Client)
			}
		}
	}
	for _, h := range open {
		h.End = last
		out = append(out, *h)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Start < out[j].Start })
	return out
}

// countDoubleHolds is checker (4)'s measure: the number of pairs of holds by
// different clients that overlap in time.
func countDoubleHolds(evs []worker.Event) int {
	hs := Holds(evs)
	n := 0
	for i := range hs {
		for j := i + 1; j < len(hs) && hs[j].Start < hs[i].End; j++ {
			if hs[j].Client != hs[i].Client {
				n++
			}
		}
	}
	return n
}

// checkEffects: every committed increment recorded exactly one effect and
// no effect exists without its increment (a rejected or rolled-back
// transaction's effect never committed); every effect was delivered; the
// provider charged exactly the effects' keys, each once, however often the
// relay was killed.
func checkEffects(r *Result, db DBState) {
	r.Effects = len(db.Effects)
	rows := map[opKey]bool{}
	for _, row := range db.Rows {
		rows[opKey{row.Client, row.Op}] = true
	}
	effects := map[opKey]int{}
	keys := map[string]bool{}
	for _, e := range db.Effects {
		k := opKey{e.Client, e.Op}
		effects[k]++
		keys[e.Key] = true
		if !rows[k] {
			r.failf("effects: effect of %s op %d committed without its increment", e.Client, e.Op)
		}
		if e.State != "delivered" {
			r.failf("effects: effect of %s op %d is %s 30s after the run, not delivered", e.Client, e.Op, e.State)
		}
	}
	for k := range rows {
		if effects[k] != 1 {
			r.failf("effects: increment of %s op %d has %d effects, want 1", k.client, k.op, effects[k])
		}
	}
	charged := map[string]int{}
	for _, key := range db.Charges {
		charged[key]++
		if !keys[key] {
			r.failf("effects: the provider charged key %s, which no committed effect has", key)
		}
	}
	for key := range keys {
		if charged[key] != 1 {
			r.failf("effects: key %s charged %d times, want 1", key, charged[key])
		}
	}
}
