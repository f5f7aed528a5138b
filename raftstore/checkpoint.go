package raftstore

import (
	"fmt"
	"sort"
	"sync/atomic"
	"time"
)

// A checkpoint says: every token handed out for a request that arrived
// after At is above Counter. The FSM records them from the time the leader
// appended each entry (raft.Log.AppendedAt), never from a local clock, so
// every node holds the same list; see DESIGN.md, "Checkpoints: the counter
// as it was".
type checkpoint struct {
	// At is the leader's time the entry was appended, in Unix nanoseconds.
	At int64 `json:"at"`
	// Counter is at most the lowest token any request arriving after At
	// can be handed out.
	Counter int64 `json:"counter"`
}

// reserveRun is the run of reservations the leader of Term may still hand
// tokens out of: every reservation of Term since the last checkpoint (or
// since the first of Term). Base is the counter before the first of them,
// so every token of the run is above Base.
type reserveRun struct {
	Term uint64 `json:"term"`
	Base int64  `json:"base"`
}

// defaultCheckpointInterval is how far apart checkpoints are recorded.
const defaultCheckpointInterval = time.Minute

// checkpointInterval is part of the replicated state machine: every node
// must use the same, or their checkpoints differ. Only tests change it.
var checkpointInterval atomic.Int64

func init() { checkpointInterval.Store(int64(defaultCheckpointInterval)) }

// SetCheckpointIntervalForTest sets how far apart checkpoints are recorded
// in this process, and returns a function that sets it back. Every node of
// a cluster must use the same interval: it is meant for tests that run a
// whole cluster in one process. d must be positive.
func SetCheckpointIntervalForTest(d time.Duration) (restore func()) {
	if d <= 0 {
		panic(fmt.Sprintf("raftstore: checkpoint interval %v; give a positive duration", d))
	}
	old := checkpointInterval.Swap(int64(d))
	return func() { checkpointInterval.Store(old) }
}

// clockStepBack is how far behind the last checkpoint a leader's clock may
// be before the checkpoints after its time are dropped (a clock that was
// set far ahead and then corrected would otherwise stop checkpoints until
// real time caught up with it).
const clockStepBack = time.Hour

// maxCheckpoints bounds the list a snapshot may hold; thinning keeps it
// near 1,600 with the default interval.
const maxCheckpoints = 10000

// thinEvery: the list is thinned when its length is a multiple of it, so
// that thinning costs little per entry and depends on the state alone.
const thinEvery = 32

// checkpointTiers is the resolution kept by age (relative to the entry
// being applied): one checkpoint per interval for 2 hours, per hour for 30
// days, per day for 2 years; older ones are dropped. Within a bucket the
// newest is kept (the highest floor that is still true for the bucket).
var checkpointTiers = []struct {
	maxAge time.Duration
	width  time.Duration // 0: the checkpoint interval
}{
	{2 * time.Hour, 0},
	{30 * 24 * time.Hour, time.Hour},
	{730 * 24 * time.Hour, 24 * time.Hour},
}

// recordCheckpointLocked records a checkpoint for the entry at index, of
// term, appended at appendedAt (Unix nanoseconds; 0 for an entry without
// one, which records nothing), that moved the counter from
// before; reserve says whether it is a reservation. f.mu is held.
//
// The value is the counter before the entry, or the base of the run of
// reservations of the entry's term, whichever is lower: the leader of that
// term may still hand out tokens of those ranges. After recording, the
// entry ends the run: ranges reserved before it are no longer handed out
// once the leader applied it (otherMoveIndex), so the next checkpoint's
// value follows the counter, one interval behind.
func (f *fsm) recordCheckpointLocked(index, term uint64, appendedAt int64, before int64, reserve bool) {
	if appendedAt == 0 {
		if reserve {
			f.extendRunLocked(term, before)
		}
		return
	}
	interval := checkpointInterval.Load()
	cps := f.state.Checkpoints
	if n := len(cps); n > 0 {
		last := cps[n-1].At
		switch {
		case appendedAt >= last && appendedAt-last >= interval:
		case appendedAt < last && last-appendedAt > int64(clockStepBack):
			// The leader's clock is far behind the last checkpoint:
			// forget the checkpoints after its time (fewer checkpoints
			// only lower floors).
			i := sort.Search(n, func(i int) bool { return cps[i].At >= appendedAt })
			cps = cps[:i:i]
		default:
			if reserve {
				f.extendRunLocked(term, before)
			}
			return
		}
	}
	v := before
	if r := f.state.Run; r != nil && r.Term == term {
		v = min(v, r.Base)
	}
	// Never true with the rule above (a run starts at or after the last
	// checkpoint's entry); kept so that the list stays non-decreasing
	// whatever a snapshot held, by lowering (never raising) a value.
	for j := len(cps) - 1; j >= 0 && cps[j].Counter > v; j-- {
		cps[j].Counter = v
	}
	cps = append(cps, checkpoint{At: appendedAt, Counter: v})
	if len(cps)%thinEvery == 0 {
		cps = thinCheckpoints(cps, appendedAt, interval)
	}
	f.state.Checkpoints = cps
	// The entry ends the run: a new one starts with it when it is a
	// reservation, and the leader drops ranges reserved before it.
	if reserve {
		f.state.Run = &reserveRun{Term: term, Base: before}
	} else {
		f.state.Run = nil
	}
	f.cut = max(f.cut, index-1)
}

// extendRunLocked accounts for a reservation of term that records no
// checkpoint: it joins the run of its term, or starts a new one.
func (f *fsm) extendRunLocked(term uint64, before int64) {
	if r := f.state.Run; r != nil && r.Term == term {
		return
	}
	f.state.Run = &reserveRun{Term: term, Base: before}
}

// thinCheckpoints keeps, per tier, the newest checkpoint of each bucket,
// ages counted from now; checkpoints older than the last tier are dropped.
// It depends only on its arguments.
func thinCheckpoints(cps []checkpoint, now, interval int64) []checkpoint {
	out := cps[:0:0]
	type key struct {
		tier   int
		bucket int64
	}
	var prev key
	for _, c := range cps {
		age := now - c.At
		tier := -1
		for t, ti := range checkpointTiers {
			if age < int64(ti.maxAge) {
				tier = t
				break
			}
		}
		if tier < 0 {
			continue
		}
		width := int64(checkpointTiers[tier].width)
		if width == 0 {
			width = interval
		}
		k := key{tier, floorDiv(c.At, width)}
		if len(out) > 0 && k == prev {
			out[len(out)-1] = c // the newer one of the same bucket
		} else {
			out = append(out, c)
		}
		prev = k
	}
	return out
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if (a%b != 0) && ((a < 0) != (b < 0)) {
		q--
	}
	return q
}

// validCheckpoints reports what is wrong with checkpoints restored from a
// snapshot, or nil: times must increase, values must not decrease and stay
// within 0..counter.
func validCheckpoints(cps []checkpoint, run *reserveRun, counter int64) error {
	if len(cps) > maxCheckpoints {
		return fmt.Errorf("%d checkpoints, more than the %d this FSM ever keeps", len(cps), maxCheckpoints)
	}
	for i, c := range cps {
		if c.Counter < 0 || c.Counter > counter {
			return fmt.Errorf("checkpoint %d has counter %d, outside 0..%d", i, c.Counter, counter)
		}
		if i > 0 && (c.At <= cps[i-1].At || c.Counter < cps[i-1].Counter) {
			return fmt.Errorf("checkpoint %d (%d at %d) does not follow checkpoint %d (%d at %d)",
				i, c.Counter, c.At, i-1, cps[i-1].Counter, cps[i-1].At)
		}
	}
	if run != nil && (run.Base < 0 || run.Base > counter) {
		return fmt.Errorf("reservation run base %d outside 0..%d", run.Base, counter)
	}
	return nil
}

// floorAt returns the newest checkpoint recorded at or before t (Unix
// nanoseconds); ok is false when none is that old.
func (f *fsm) floorAt(t int64) (checkpoint, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	cps := f.state.Checkpoints
	i := sort.Search(len(cps), func(i int) bool { return cps[i].At > t })
	if i == 0 {
		return checkpoint{}, false
	}
	return cps[i-1], true
}

// checkpoints returns a copy of the checkpoints.
func (f *fsm) checkpoints() []checkpoint {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return append([]checkpoint(nil), f.state.Checkpoints...)
}
