package raftstore

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fencegate/fencegate/tokenapi"
	"github.com/hashicorp/raft"
)

// ErrNotConfirmed means a confirmation round failed: a majority of the
// voters did not answer, after the round began, that they follow this
// leader in its term. Nothing was handed out for the requests waiting on
// the round; the leader dropped its reserved range. Retry.
var ErrNotConfirmed = errors.New("raftstore: leadership not confirmed by a majority of the voters")

// Reserve commits one log entry that reserves n tokens and returns the
// range FSM.Apply set aside for it, with the term and index of the entry.
// Like Allocate it is applied relative to the counter, so the range lies
// above every range before it in the log; unlike Allocate its tokens are
// not handed out yet: a ReadIndex hands them out from memory, each only
// after a confirmation round.
func (s *Store) Reserve(ctx context.Context, n int) (Range, error) {
	if n <= 0 || n > maxReserve {
		return Range{}, fmt.Errorf("%w: reserve %d tokens; reserve 1..%d", ErrBadConfig, n, maxReserve)
	}
	if err := ctx.Err(); err != nil {
		return Range{}, err
	}
	if s.raft.State() != raft.Leader {
		return Range{}, s.notLeader()
	}
	f := s.raft.Apply(encodeUvarint(cmdReserve, uint64(n)), enqueueTimeout)
	if err := wait(ctx, f); err != nil {
		return Range{}, fmt.Errorf("reserve %d tokens: %w", n, err)
	}
	switch r := f.Response().(type) {
	case applyResult:
		return Range{First: r.First, Count: r.Count, Term: r.Term, Index: r.Index, Leader: s.cfg.ID}, nil
	case error:
		return Range{}, fmt.Errorf("reserve %d tokens: %w", n, r)
	default:
		return Range{}, fmt.Errorf("reserve %d tokens: unexpected FSM response %T", n, r)
	}
}

// maxReserve caps one reservation (FSM.Apply accepts up to MaxInt32).
const maxReserve = MaxReserveSize

// LeaderTerm returns the term this node leads in, read now; ok is false
// when it does not lead. The term is read before and after the state, so a
// true answer means the node was leader in that term at one moment during
// the call.
func (s *Store) LeaderTerm() (term uint64, ok bool) {
	t1 := s.raft.CurrentTerm()
	if s.raft.State() != raft.Leader {
		return 0, false
	}
	if t2 := s.raft.CurrentTerm(); t2 != t1 {
		return 0, false
	}
	return t1, true
}

// View is a node's answer to a confirmation round: its current term and
// the leader it follows in that term ("" while it knows none), read when it
// answers.
type View struct {
	NodeID   string `json:"node_id"`
	Term     uint64 `json:"term"`
	LeaderID string `json:"leader_id"`
}

// View returns this node's current term and the leader it follows, read
// now. The term is read first: if the node moved to a later term between
// the two reads, the leader read belongs to that term (hashicorp/raft
// forgets the leader when the term changes) and will not name the old
// leader, or the term read is already the later one.
func (s *Store) View() View {
	term := s.raft.CurrentTerm()
	_, lid := s.raft.LeaderWithID()
	if s.raft.CurrentTerm() != term {
		// Moved on while reading: answer with the later term alone.
		return View{NodeID: s.cfg.ID, Term: s.raft.CurrentTerm()}
	}
	return View{NodeID: s.cfg.ID, Term: term, LeaderID: string(lid)}
}

// Voters returns the voters of this node's latest Raft configuration (the
// one a leader counts its commit quorum in), with the API address the
// replicated state holds for each.
func (s *Store) Voters() []tokenapi.Peer {
	f := s.raft.GetConfiguration()
	if f.Error() != nil {
		return nil
	}
	var out []tokenapi.Peer
	for _, srv := range f.Configuration().Servers {
		if srv.Suffrage == raft.Voter {
			out = append(out, tokenapi.Peer{ID: string(srv.ID), RaftAddr: string(srv.Address), APIAddr: s.apiAddr(string(srv.ID))})
		}
	}
	return out
}

// VerifyLeader is hashicorp/raft's own leadership check, exposed for the
// test that shows why ReadIndex does not rely on it: in v1.7.2 it counts
// acknowledgements of heartbeats sent before the call, and acknowledgements
// of non-voters, so it can pass for a deposed leader.
func (s *Store) VerifyLeader(ctx context.Context) error {
	return wait(ctx, s.raft.VerifyLeader())
}

// onLeadershipEvent registers fn, called (from the store's own goroutines,
// without blocking them for long) when this node gains or loses leadership
// or sees a new leader.
func (s *Store) onLeadershipEvent(fn func()) {
	s.hooksMu.Lock()
	s.hooks = append(s.hooks, fn)
	s.hooksMu.Unlock()
}

func (s *Store) leadershipEvent() {
	s.hooksMu.Lock()
	hooks := append([]func(){}, s.hooks...)
	s.hooksMu.Unlock()
	for _, fn := range hooks {
		fn()
	}
}

// Confirmer asks another voter, over the node-to-node API, for its View.
// The answer must be read by that voter when it answers the call (never
// cached), and come from that voter (the implementation checks the
// answering node's identity).
type Confirmer interface {
	View(ctx context.Context, voter tokenapi.Peer) (View, error)
}

// ReadIndexConfig configures a ReadIndex. Zero values take the defaults.
type ReadIndexConfig struct {
	// ReserveSize is how many tokens one reservation entry sets aside. The
	// default is DefaultReserveSize (65536), the most MaxReserveSize. Tokens of a range not handed out when the leader
	// changes are never handed out (tokens have gaps, never repeats).
	ReserveSize int
	// RoundTimeout bounds one confirmation round; a round that has not
	// heard from a majority by then fails (it never succeeds by waiting).
	// The default is DefaultRoundTimeout (1s).
	RoundTimeout time.Duration
	// OnReserve, when set, is called with each reservation committed and
	// the time its commit took (for metrics).
	OnReserve func(r Range, took time.Duration)
}

// ReadIndex hands out tokens from a range the leader reserved with one
// committed entry, without a log write per batch. Its Alloc is an
// AllocFunc for a Batcher: the batch it serves was formed before Alloc
// runs, so every request in it arrived before the confirmation round that
// Alloc begins, and Alloc hands out tokens only after that round
// succeeded. See DESIGN.md, "Tokens from a reserved range", for why a token
// handed out this way is larger than every token returned before its
// request arrived.
type ReadIndex struct {
	s       *Store
	confirm Confirmer
	size    int
	timeout time.Duration
	onRes   func(Range, time.Duration)
	ctx     context.Context
	cancel  context.CancelFunc

	mu sync.Mutex
	// term is the term the held ranges were reserved in; 0 when none is
	// held.
	term   uint64
	ranges []heldRange // ascending
	// reserving is closed when the reservation in flight ends; nil when
	// none is.
	reserving  chan struct{}
	reserveErr error

	// questions counts the confirmation questions in flight, which may
	// outlive their round (see round); Close waits for them. qclosed,
	// under qmu, refuses new questions once Close began.
	questions sync.WaitGroup
	qmu       sync.Mutex
	qclosed   bool
	// fast is the voter that answered first in the last round that
	// succeeded, roundAvg a moving average of the rounds' time; under pmu.
	pmu      sync.Mutex
	fast     string
	roundAvg time.Duration

	rounds, roundFails, reservations, hedges atomic.Uint64
	roundNanos                               atomic.Int64
	lastFailLog                              atomic.Int64 // unix nanoseconds; failures are logged at most once a second
}

// heldRange is the part of a reserved range not handed out yet: next to
// last, reserved by the entry at index.
type heldRange struct {
	next, last int64
	index      uint64
}

// NewReadIndex returns the read-index path of s, asking other voters
// through confirm. Close it when done.
func NewReadIndex(s *Store, confirm Confirmer, cfg ReadIndexConfig) *ReadIndex {
	if cfg.ReserveSize <= 0 {
		cfg.ReserveSize = DefaultReserveSize
	}
	cfg.ReserveSize = min(cfg.ReserveSize, maxReserve)
	if cfg.RoundTimeout <= 0 {
		cfg.RoundTimeout = DefaultRoundTimeout
	}
	ri := &ReadIndex{s: s, confirm: confirm, size: cfg.ReserveSize, timeout: cfg.RoundTimeout, onRes: cfg.OnReserve}
	ri.ctx, ri.cancel = context.WithCancel(context.Background())
	// The first sign of lost leadership drops the ranges.
	s.onLeadershipEvent(func() {
		if term, ok := s.LeaderTerm(); !ok || term != ri.heldTerm() {
			ri.drop(0)
		}
	})
	return ri
}

// Close stops reservations and confirmation questions in flight, and
// waits for the questions; later calls fail.
func (ri *ReadIndex) Close() {
	ri.qmu.Lock()
	ri.qclosed = true
	ri.qmu.Unlock()
	ri.cancel()
	ri.questions.Wait()
	ri.drop(0)
}

func (ri *ReadIndex) heldTerm() uint64 {
	ri.mu.Lock()
	defer ri.mu.Unlock()
	return ri.term
}

// drop forgets the held ranges, if they are of term (any term when 0).
func (ri *ReadIndex) drop(term uint64) {
	ri.mu.Lock()
	defer ri.mu.Unlock()
	if term == 0 || ri.term == term {
		ri.term, ri.ranges = 0, nil
	}
}

// ReadIndexStats are counters for status and metrics.
type ReadIndexStats struct {
	// Range is the range in use; nil when none is held.
	Range *tokenapi.ReservedRange
	// Rounds and RoundFailures count confirmation rounds begun and
	// failed; RoundSeconds is the time spent in rounds.
	Rounds, RoundFailures uint64
	RoundSeconds          float64
	// Reservations counts reservation entries committed.
	Reservations uint64
	// Hedges counts rounds that asked the voters beyond the majority
	// they asked first, because its answers were late.
	Hedges uint64
}

// Stats returns the range in use and the counters.
func (ri *ReadIndex) Stats() ReadIndexStats {
	st := ReadIndexStats{Rounds: ri.rounds.Load(), RoundFailures: ri.roundFails.Load(),
		RoundSeconds: time.Duration(ri.roundNanos.Load()).Seconds(), Reservations: ri.reservations.Load(),
		Hedges: ri.hedges.Load()}
	ri.mu.Lock()
	defer ri.mu.Unlock()
	if len(ri.ranges) > 0 {
		h := ri.ranges[0]
		st.Range = &tokenapi.ReservedRange{Next: h.next, Last: ri.ranges[len(ri.ranges)-1].last, Term: ri.term, Index: h.index}
	}
	return st
}

// Alloc hands out n consecutive tokens from a reserved range, after a
// confirmation round that begins inside this call. It is an AllocFunc.
func (ri *ReadIndex) Alloc(ctx context.Context, n int) (Range, error) {
	if n <= 0 || n > maxReserve {
		return Range{}, fmt.Errorf("%w: allocate %d tokens", ErrBadConfig, n)
	}
	term, err := ri.ensure(ctx, n)
	if err != nil {
		return Range{}, err
	}
	// The round begins here: every request this call serves arrived
	// before it.
	if err := ri.round(ctx, term); err != nil {
		ri.drop(term)
		if now := time.Now().UnixNano(); now-ri.lastFailLog.Load() >= int64(time.Second) {
			ri.lastFailLog.Store(now)
			ri.s.log.Warn("confirmation round failed: nothing handed out, reserved range dropped", "term", term, "err", err)
		}
		return Range{}, err
	}
	for {
		r, ok, err := ri.take(term, n)
		if err != nil || ok {
			return r, err
		}
		// The range ran out meanwhile (concurrent calls): any range of
		// this term will do, also one reserved after the round began.
		if t, err := ri.ensure(ctx, n); err != nil {
			return Range{}, err
		} else if t != term {
			return Range{}, fmt.Errorf("%w: the term changed from %d to %d during the round", ErrNotConfirmed, term, t)
		}
	}
}

// validLocked reports, under ri.mu, whether the held ranges may be handed out:
// this node leads in their term and no allocation or raise was applied
// after the first of them.
func (ri *ReadIndex) validLocked() bool {
	if ri.term == 0 || len(ri.ranges) == 0 {
		return false
	}
	if t, ok := ri.s.LeaderTerm(); !ok || t != ri.term {
		return false
	}
	return ri.s.fsm.otherMoveIndex() < ri.ranges[0].index
}

// ensure makes sure a range of the current term holds at least n tokens,
// committing a reservation if needed (and starting the next one early,
// once less than half a reservation is left), and returns the term.
func (ri *ReadIndex) ensure(ctx context.Context, n int) (uint64, error) {
	for {
		term, ok := ri.s.LeaderTerm()
		if !ok {
			ri.drop(0)
			return 0, ri.s.notLeader()
		}
		ri.mu.Lock()
		if ri.term != term || !ri.validLocked() {
			ri.term, ri.ranges = term, nil
		}
		if ri.reserving == nil && ri.s.fsm.counter() == math.MaxInt64 &&
			!slices.ContainsFunc(ri.ranges, func(h heldRange) bool { return h.last-h.next+1 >= int64(n) }) {
			// Nothing more can be reserved and no range held has n
			// tokens: the ranges stay for requests that ask for fewer.
			ri.mu.Unlock()
			return 0, fmt.Errorf("%w: %d tokens asked, %d left below the largest token %d",
				ErrExhausted, n, ri.leftLocked(), int64(math.MaxInt64))
		}
		// Ranges too short for n are skipped: tokens have gaps, never
		// repeats.
		var left int64
		for len(ri.ranges) > 0 && ri.ranges[0].last-ri.ranges[0].next+1 < int64(n) {
			ri.ranges = ri.ranges[1:]
		}
		for _, h := range ri.ranges {
			left += h.last - h.next + 1
		}
		if len(ri.ranges) > 0 {
			if left-int64(n) < int64(ri.size/2) && ri.reserving == nil && ri.s.fsm.counter() < math.MaxInt64 {
				ri.startReserveLocked(term, n)
			}
			ri.mu.Unlock()
			return term, nil
		}
		if ri.reserving == nil {
			ri.startReserveLocked(term, n)
		}
		ch := ri.reserving
		ri.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
		ri.mu.Lock()
		err := ri.reserveErr
		ri.mu.Unlock()
		if err != nil {
			return 0, err
		}
	}
}

// leftLocked is how many tokens the held ranges hold; ri.mu is held.
func (ri *ReadIndex) leftLocked() int64 {
	var left int64
	for _, h := range ri.ranges {
		left += h.last - h.next + 1
	}
	return left
}

// startReserveLocked commits a reservation in the background; ri.mu is held.
func (ri *ReadIndex) startReserveLocked(term uint64, n int) {
	ch := make(chan struct{})
	ri.reserving, ri.reserveErr = ch, nil
	size := max(ri.size, n)
	go func() {
		ctx, cancel := context.WithTimeout(ri.ctx, 10*time.Second)
		defer cancel()
		t0 := time.Now()
		r, err := ri.s.Reserve(ctx, size)
		if err == nil && ri.onRes != nil {
			ri.onRes(r, time.Since(t0))
		}
		ri.mu.Lock()
		defer ri.mu.Unlock()
		switch {
		case err != nil:
		case r.Term != term || ri.term != term:
			// Committed in another term than the one it was asked for:
			// not this leadership's range.
			err = fmt.Errorf("%w: reservation committed in term %d, leading in %d", ErrLeadershipLost, r.Term, ri.term)
		default:
			ri.reservations.Add(1)
			ri.ranges = append(ri.ranges, heldRange{next: r.First, last: r.First + int64(r.Count) - 1, index: r.Index})
		}
		ri.reserveErr = err
		ri.reserving = nil
		close(ch)
	}()
}

// take carves n tokens out of the held ranges of term; ok is false when
// they hold too few (ensure again), err is set when they may not be used.
func (ri *ReadIndex) take(term uint64, n int) (Range, bool, error) {
	ri.mu.Lock()
	defer ri.mu.Unlock()
	if ri.term != term || !ri.validLocked() {
		if ri.term == term {
			ri.term, ri.ranges = 0, nil
		}
		if t, ok := ri.s.LeaderTerm(); !ok || t != term {
			return Range{}, false, fmt.Errorf("%w: term %d ended during the round", ErrNotConfirmed, term)
		}
		return Range{}, false, nil
	}
	for len(ri.ranges) > 0 {
		h := &ri.ranges[0]
		if h.last-h.next+1 >= int64(n) {
			r := Range{First: h.next, Count: n, Term: term, Index: h.index, Leader: ri.s.cfg.ID}
			h.next += int64(n)
			if h.next > h.last {
				ri.ranges = ri.ranges[1:]
			}
			return r, true, nil
		}
		ri.ranges = ri.ranges[1:]
	}
	return Range{}, false, nil
}

// voterAnswer is one voter's answer to a confirmation question: nil when
// it follows this node in the round's term.
type voterAnswer struct {
	id  string
	err error
}

// questions are one round's questions in flight: they share a context
// that the last of them to end releases, and send their verdicts to
// answers, buffered for all of them.
type questions struct {
	ctx     context.Context
	cancel  context.CancelFunc
	left    atomic.Int32
	term    uint64
	answers chan voterAnswer
}

// ask puts the round's question to voter v and sends the verdict.
func (ri *ReadIndex) ask(q *questions, v tokenapi.Peer) {
	defer ri.questions.Done()
	defer func() {
		if q.left.Add(-1) == 0 {
			q.cancel()
		}
	}()
	self := ri.s.cfg.ID
	view, err := ri.confirm.View(q.ctx, v)
	switch {
	case err != nil:
	case view.NodeID != v.ID:
		err = fmt.Errorf("answered as %q", view.NodeID)
	case view.Term != q.term:
		err = fmt.Errorf("is in term %d, not %d", view.Term, q.term)
	case view.LeaderID != self:
		err = fmt.Errorf("follows %q in term %d", view.LeaderID, q.term)
	}
	q.answers <- voterAnswer{v.ID, err}
}

// preferred returns others with the voter that answered first in the last
// round that succeeded in front; the rest keep their order.
func (ri *ReadIndex) preferred(others []tokenapi.Peer) []tokenapi.Peer {
	ri.pmu.Lock()
	fast := ri.fast
	ri.pmu.Unlock()
	if i := slices.IndexFunc(others, func(v tokenapi.Peer) bool { return v.ID == fast }); i > 0 {
		others[0], others[i] = others[i], others[0]
	}
	return others
}

// answered records the voter that answered a successful round first and
// the round's time, of which the hedge delay keeps a moving average.
func (ri *ReadIndex) answered(first string, took time.Duration) {
	ri.pmu.Lock()
	defer ri.pmu.Unlock()
	ri.fast = first
	if ri.roundAvg == 0 {
		ri.roundAvg = took
	} else {
		ri.roundAvg += (took - ri.roundAvg) / 8
	}
}

// hedgeDelay is how long a round waits for the majority it asked before
// it asks the remaining voters too: three times the average round, and a
// millisecond, at most half the round timeout.
func (ri *ReadIndex) hedgeDelay() time.Duration {
	ri.pmu.Lock()
	avg := ri.roundAvg
	ri.pmu.Unlock()
	if avg == 0 {
		return 0 // no round succeeded yet: ask every voter at once
	}
	return min(3*avg+time.Millisecond, ri.timeout/2)
}

// round runs one confirmation round for term: it succeeds once a majority
// of the voters of the latest configuration each answered, at a moment
// after the round began, that they follow this node in term; the leader
// counts itself, checked after the others answered.
func (ri *ReadIndex) round(ctx context.Context, term uint64) (err error) {
	start := time.Now()
	ri.rounds.Add(1)
	defer func() {
		ri.roundNanos.Add(int64(time.Since(start)))
		if err != nil {
			ri.roundFails.Add(1)
		}
	}()
	self := ri.s.cfg.ID
	voters := ri.s.Voters()
	need := len(voters)/2 + 1
	var others []tokenapi.Peer
	selfVotes := false
	for _, v := range voters {
		if v.ID == self {
			selfVotes = true
		} else {
			others = append(others, v)
		}
	}
	if !selfVotes {
		return fmt.Errorf("%w: node %s is not a voter of its configuration", ErrNotConfirmed, self)
	}
	needOthers := need - 1
	if needOthers > 0 {
		ctx, cancel := context.WithTimeout(ctx, ri.timeout)
		defer cancel()
		// A majority is asked first: the voters that answered first in the
		// last round, then the others in their configuration order. The
		// rest are asked when an answer fails, or when the answers are
		// later than rounds usually take (hedge): asking every voter each
		// time cost a question per voter beyond the majority, the same
		// HTTP request and handler as the ones counted. Any voter's
		// answer counts; only how many are asked changes.
		//
		// The questions are not cancelled when a majority has answered:
		// the last answer is read to its end, so its connection carries
		// the next round (an HTTP/1.1 request cancelled in flight closes
		// its connection, and every round would dial the slowest voter
		// again, with TLS shake hands again). They end by the round's
		// deadline at the latest, or at Close, which waits for them. An
		// answer that comes after its round returned is not counted by
		// any other round: each round asks again and reads its own
		// channel.
		others = ri.preferred(others)
		answers := make(chan voterAnswer, len(others))
		q := &questions{term: term, answers: answers}
		q.ctx, q.cancel = context.WithTimeout(ri.ctx, ri.timeout)
		q.left.Store(int32(len(others)))
		asked := 0
		askUpTo := func(n int) bool {
			ri.qmu.Lock()
			defer ri.qmu.Unlock()
			if ri.qclosed {
				return false
			}
			for ; asked < n; asked++ {
				ri.questions.Add(1)
				go ri.ask(q, others[asked])
			}
			return true
		}
		defer func() {
			// Questions never asked count as ended.
			if k := int32(len(others) - asked); k > 0 && q.left.Add(-k) == 0 {
				q.cancel()
			}
		}()
		if !askUpTo(needOthers) {
			return fmt.Errorf("%w: the read-index path is closed", ErrNotConfirmed)
		}
		hedge := time.NewTimer(ri.hedgeDelay())
		defer hedge.Stop()
		acks, fails := 0, 0
		var why []string
		var first string
		for acks < needOthers {
			if len(others)-fails < needOthers {
				return fmt.Errorf("%w in term %d: %s", ErrNotConfirmed, term, strings.Join(why, "; "))
			}
			var a voterAnswer
			select {
			case a = <-answers:
			case <-hedge.C:
				if asked < len(others) {
					ri.hedges.Add(1)
				}
				if !askUpTo(len(others)) {
					return fmt.Errorf("%w: the read-index path is closed", ErrNotConfirmed)
				}
				continue
			case <-ctx.Done():
				why = append(why, fmt.Sprintf("%d of %d voters confirmed before the round ended (%v)", acks+1, len(voters), ctx.Err()))
				return fmt.Errorf("%w in term %d: %s", ErrNotConfirmed, term, strings.Join(why, "; "))
			}
			if a.err == nil {
				if acks == 0 {
					first = a.id
				}
				acks++
				continue
			}
			fails++
			why = append(why, a.id+" "+a.err.Error())
			// Replace the failed question, so that a majority can still
			// answer.
			if !askUpTo(min(len(others), asked+1)) {
				return fmt.Errorf("%w: the read-index path is closed", ErrNotConfirmed)
			}
		}
		ri.answered(first, time.Since(start))
	}
	if t, ok := ri.s.LeaderTerm(); !ok || t != term {
		return fmt.Errorf("%w: node %s no longer leads in term %d", ErrNotConfirmed, self, term)
	}
	return nil
}
