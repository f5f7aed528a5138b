package raftstore

import (
	"bytes"
	"encoding/json"
	"io"
	"math/rand/v2"
	"reflect"
	"sort"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func applyAt(f *fsm, index, term uint64, at time.Time, data []byte) any {
	return f.Apply(&raft.Log{Index: index, Term: term, Type: raft.LogCommand, Data: data, AppendedAt: at})
}

func TestCheckpointRecordsCounterBeforeEntry(t *testing.T) {
	f := newFSM()
	applyCmd(f, 1, encodeAllocate(5)) // no AppendedAt: an entry written before the field
	if cps := f.checkpoints(); len(cps) != 0 {
		t.Fatalf("an entry without AppendedAt recorded %v", cps)
	}
	applyAt(f, 2, 1, t0, encodeAllocate(3))                     // 6..8: checkpoint (t0, 5)
	applyAt(f, 3, 1, t0.Add(30*time.Second), encodeAllocate(2)) // too soon
	applyAt(f, 4, 1, t0.Add(time.Minute), encodeMember(cmdSetMember, memberMeta{ID: "n1"}))
	applyAt(f, 5, 1, t0.Add(61*time.Second), encodeUvarint(cmdRaiseCounter, 3)) // does not move the counter
	applyAt(f, 6, 1, t0.Add(62*time.Second), encodeAllocate(1))                 // 11: checkpoint (t0+62s, 10)
	want := []checkpoint{{At: t0.UnixNano(), Counter: 5}, {At: t0.Add(62 * time.Second).UnixNano(), Counter: 10}}
	if got := f.checkpoints(); !reflect.DeepEqual(got, want) {
		t.Fatalf("checkpoints = %v, want %v", got, want)
	}
	for _, c := range []struct {
		at   time.Time
		want int64
		ok   bool
	}{{t0.Add(-time.Nanosecond), 0, false}, {t0, 5, true}, {t0.Add(61 * time.Second), 5, true}, {t0.Add(time.Hour), 10, true}} {
		cp, ok := f.floorAt(c.at.UnixNano())
		if ok != c.ok || cp.Counter != c.want {
			t.Errorf("floorAt(%v) = %v, %v; want %d, %v", c.at, cp, ok, c.want, c.ok)
		}
	}
}

// leaderModel drives an FSM the way a leader on the read-index path does:
// it reserves ranges (the next one once less than half a range is left,
// one reservation in flight at a time), hands tokens out of them in
// ascending order from memory, hands out of a range only while
// fsm.otherMoveIndex allows it, and drops them when leadership moves. A
// reservation is appended at one time and applied on the leader later:
// requests that arrive in between are served from the ranges held before
// it. Requests arrive at increasing times; each hand-out is recorded with
// its request's arrival.
type leaderModel struct {
	t      *testing.T
	f      *fsm
	rng    *rand.Rand
	index  uint64
	term   uint64
	now    time.Time
	size   int64
	ranges []heldRange
	// pending is the reservation appended and not yet applied.
	pending *raft.Log
	// handouts are (arrival, token) in arrival order; recorded every
	// checkpoint ever recorded, thinned or not.
	arrivals []int64
	tokens   []int64
	recorded []checkpoint
}

func (m *leaderModel) tick(max time.Duration) {
	m.now = m.now.Add(1 + time.Duration(m.rng.Int64N(int64(max))))
}

// appendEntry appends an entry now; apply applies it.
func (m *leaderModel) appendEntry(data []byte) *raft.Log {
	m.index++
	l := &raft.Log{Index: m.index, Term: m.term, Type: raft.LogCommand, Data: data, AppendedAt: m.now}
	m.tick(time.Millisecond)
	return l
}

func (m *leaderModel) apply(l *raft.Log) any {
	res := m.f.Apply(l)
	if cps := m.f.checkpoints(); len(cps) > 0 {
		last := cps[len(cps)-1]
		if len(m.recorded) == 0 || m.recorded[len(m.recorded)-1].At != last.At {
			m.recorded = append(m.recorded, last)
		}
	}
	return res
}

// applyPending applies the reservation in flight, and keeps its range when
// the leader still leads in its term.
func (m *leaderModel) applyPending() {
	if m.pending == nil {
		return
	}
	l := m.pending
	m.pending = nil
	r := m.apply(l).(applyResult)
	if l.Term == m.term {
		m.ranges = append(m.ranges, heldRange{next: r.First, last: r.First + int64(r.Count) - 1, index: r.Index})
	}
}

// valid drops the ranges when the first may no longer be handed out, as
// ReadIndex.validLocked does.
func (m *leaderModel) valid() {
	if len(m.ranges) > 0 && m.f.otherMoveIndex() >= m.ranges[0].index {
		m.ranges = nil
	}
}

func (m *leaderModel) left() (n int64) {
	for _, h := range m.ranges {
		n += h.last - h.next + 1
	}
	return n
}

// serve hands out n tokens for a request arriving now.
func (m *leaderModel) serve(n int64) {
	if m.pending != nil && m.rng.IntN(3) == 0 {
		m.applyPending()
	}
	arrival := m.now.UnixNano()
	m.tick(time.Millisecond)
	m.valid()
	if m.left()-n < m.size/2 && m.pending == nil {
		m.pending = m.appendEntry(encodeUvarint(cmdReserve, uint64(m.size)))
	}
	m.take(arrival, n)
}

// serveTwo serves a request of big tokens and one of small tokens that
// arrives after big's reservation was appended, before big is served.
func (m *leaderModel) serveTwo(big, small int64) {
	if m.pending != nil && m.rng.IntN(3) == 0 {
		m.applyPending()
	}
	bigArrival := m.now.UnixNano()
	m.tick(time.Millisecond)
	m.valid()
	if m.left()-big < m.size/2 && m.pending == nil {
		m.pending = m.appendEntry(encodeUvarint(cmdReserve, uint64(m.size)))
	}
	m.serve(small)
	m.take(bigArrival, big)
}

// take hands out n tokens for a request that arrived at arrival.
func (m *leaderModel) take(arrival, n int64) {
	m.valid()
	for {
		for len(m.ranges) > 0 && m.ranges[0].last-m.ranges[0].next+1 < n {
			m.ranges = m.ranges[1:]
		}
		if len(m.ranges) > 0 {
			break
		}
		// Nothing held: wait for the reservation in flight, or start one.
		if m.pending == nil {
			m.pending = m.appendEntry(encodeUvarint(cmdReserve, uint64(max(m.size, n))))
		}
		m.applyPending()
		m.valid()
	}
	h := &m.ranges[0]
	for i := range n {
		m.arrivals = append(m.arrivals, arrival)
		m.tokens = append(m.tokens, h.next+i)
	}
	h.next += n
	if h.next > h.last {
		m.ranges = m.ranges[1:]
	}
}

// newLeader: the reservation in flight commits (or not: its range is never
// handed out either way), the ranges of the old term are dropped.
func (m *leaderModel) newLeader() {
	m.applyPending()
	m.term++
	m.ranges = nil
	m.tick(time.Second)
}

// allocate serves a batch on the commit path: its requests arrived before
// the entry was appended.
func (m *leaderModel) allocate(n int) {
	arrival := m.now.UnixNano()
	m.tick(time.Millisecond)
	l := m.appendEntry(encodeAllocate(n))
	m.applyPending() // before it in the log
	r := m.apply(l).(applyResult)
	for i := range int64(r.Count) {
		m.arrivals = append(m.arrivals, arrival)
		m.tokens = append(m.tokens, r.First+i)
	}
}

// raise raises the counter by up to 500.
func (m *leaderModel) raise() {
	l := m.appendEntry(encodeUvarint(cmdRaiseCounter, uint64(m.f.counter()+int64(m.rng.IntN(500)))))
	m.applyPending()
	m.apply(l)
}

// check fails the test if a token handed out for a request that arrived
// after a checkpoint's time is not above its counter.
func (m *leaderModel) check() {
	m.t.Helper()
	// suffix minimum of the tokens by arrival
	suf := make([]int64, len(m.tokens)+1)
	suf[len(m.tokens)] = 1<<63 - 1
	for i := len(m.tokens) - 1; i >= 0; i-- {
		suf[i] = min(suf[i+1], m.tokens[i])
	}
	for _, c := range m.recorded {
		i := sort.Search(len(m.arrivals), func(i int) bool { return m.arrivals[i] > c.At })
		if suf[i] <= c.Counter {
			m.t.Fatalf("checkpoint %d at %v: token %d was handed out for a request that arrived after it",
				c.Counter, time.Unix(0, c.At).UTC().Format(time.RFC3339Nano), suf[i])
		}
	}
}

// TestCheckpointNeverAboveLaterTokens: with reservations held in memory
// across checkpoints, leader changes, allocations and raises, no token
// handed out for a request that arrived after a checkpoint's time is at or
// below its counter; and within one long leadership the checkpoints follow
// the counter, one interval or so behind.
func TestCheckpointNeverAboveLaterTokens(t *testing.T) {
	for seed := range uint64(20) {
		m := &leaderModel{t: t, f: newFSM(), rng: rand.New(rand.NewPCG(seed, 1)), term: 1, now: t0, size: 1000}
		for step := 0; step < 20000; step++ {
			switch x := m.rng.IntN(1000); {
			case x < 2:
				m.newLeader()
			case x < 4:
				m.allocate(1 + m.rng.IntN(10))
			case x < 5:
				m.raise()
			case x < 30:
				// Two batches in flight: a large one starts the next
				// reservation, and a small one that arrived after it was
				// appended is served first, from ranges reserved before
				// the last checkpoint.
				m.serveTwo(m.size/2+m.rng.Int64N(m.size/2), 1+m.rng.Int64N(5))
			default:
				m.serve(1 + m.rng.Int64N(40))
			}
			m.tick(time.Duration(m.rng.Int64N(int64(200 * time.Millisecond))))
		}
		// Little traffic: a range lasts for several checkpoints.
		for step := 0; step < 2000; step++ {
			if m.rng.IntN(10) == 0 {
				m.serveTwo(m.size/2+m.rng.Int64N(m.size/2), 1+m.rng.Int64N(3))
			} else {
				m.serve(1 + m.rng.Int64N(3))
			}
			m.tick(time.Duration(m.rng.Int64N(int64(2 * time.Minute))))
		}
		m.check()
		if len(m.recorded) < 10 {
			t.Fatalf("seed %d: only %d checkpoints over %v", seed, len(m.recorded), m.now.Sub(t0))
		}

		// One leader for 30 minutes: the floor keeps up.
		m.newLeader()
		end := m.now.Add(30 * time.Minute)
		for m.now.Before(end) {
			m.serve(1 + m.rng.Int64N(40))
			m.tick(100 * time.Millisecond)
		}
		m.check()
		last := m.recorded[len(m.recorded)-1]
		i := sort.Search(len(m.arrivals), func(i int) bool { return m.arrivals[i] > last.At-int64(3*time.Minute) })
		if before := m.tokens[i-1]; last.Counter < before {
			t.Fatalf("seed %d: the last checkpoint (%d) is below token %d, handed out more than 3 minutes before it: the floor does not follow the counter during a leadership",
				seed, last.Counter, before)
		}
	}
}

// TestCheckpointsBoundedOverYears applies a reservation a minute for three
// years (the leader's clock, not this test's) and checks the list stays a
// few thousand long, with fine resolution for recent ages and coarser for
// older ones.
func TestCheckpointsBoundedOverYears(t *testing.T) {
	f := newFSM()
	at := t0
	end := t0.Add(3 * 365 * 24 * time.Hour)
	longest := 0
	var i uint64
	var step time.Duration
	for ; at.Before(end); at = at.Add(step) {
		// Every 10 minutes, then every minute for the last 3 hours: thinning
		// keeps the same either way, and the test stays fast.
		step = 10 * time.Minute
		if end.Sub(at) < 3*time.Hour {
			step = time.Minute + time.Second
		}
		i++
		applyAt(f, i, 1+i/10000, at, encodeUvarint(cmdReserve, 100))
		longest = max(longest, len(f.state.Checkpoints))
	}
	if longest > 2000 {
		t.Fatalf("the list grew to %d checkpoints", longest)
	}
	now := at.UnixNano()
	for _, c := range []struct {
		age, slack time.Duration
	}{{10 * time.Minute, 3 * time.Minute}, {90 * time.Minute, 3 * time.Minute}, {5 * time.Hour, time.Hour + 2*time.Minute},
		{20 * 24 * time.Hour, time.Hour + 2*time.Minute}, {365 * 24 * time.Hour, 24*time.Hour + 2*time.Minute}} {
		cp, ok := f.floorAt(now - int64(c.age))
		if !ok {
			t.Fatalf("no checkpoint %v old", c.age)
		}
		if got := time.Duration(now - cp.At); got < c.age || got > c.age+c.slack {
			t.Errorf("the checkpoint for age %v is %v old, want at most %v more", c.age, got, c.slack)
		}
	}
	if _, ok := f.floorAt(now - int64(800*24*time.Hour)); ok {
		t.Errorf("a checkpoint older than two years is kept")
	}
	t.Logf("%d checkpoints after three years (at most %d)", len(f.state.Checkpoints), longest)
}

// TestCheckpointClockStepBack: a leader whose clock is far behind the last
// checkpoint drops the checkpoints after its time instead of recording
// none until real time catches up.
func TestCheckpointClockStepBack(t *testing.T) {
	f := newFSM()
	future := t0.Add(100 * 365 * 24 * time.Hour)
	applyAt(f, 1, 1, t0, encodeAllocate(1))
	applyAt(f, 2, 1, future, encodeAllocate(1))
	applyAt(f, 3, 2, t0.Add(2*time.Minute), encodeAllocate(1))
	applyAt(f, 4, 2, t0.Add(3*time.Minute), encodeAllocate(1))
	want := []checkpoint{{t0.UnixNano(), 0}, {t0.Add(2 * time.Minute).UnixNano(), 2}, {t0.Add(3 * time.Minute).UnixNano(), 3}}
	if got := f.checkpoints(); !reflect.DeepEqual(got, want) {
		t.Fatalf("checkpoints = %v, want %v", got, want)
	}
	// A clock a little behind records nothing until it passes the last.
	applyAt(f, 5, 3, t0.Add(time.Minute), encodeAllocate(1))
	if got := f.checkpoints(); len(got) != 3 {
		t.Fatalf("a clock a minute behind changed the checkpoints: %v", got)
	}
}

// TestCheckpointsSnapshotRestoreDeterministic: an FSM restored from a
// snapshot mid-way and fed the rest of the log ends with the same state,
// checkpoints and reservation run included, as one that applied all of it.
func TestCheckpointsSnapshotRestoreDeterministic(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	var log []*raft.Log
	at, term := t0, uint64(1)
	for i := uint64(1); i <= 3000; i++ {
		at = at.Add(time.Duration(rng.Int64N(int64(20 * time.Second))))
		if rng.IntN(100) == 0 {
			term++
		}
		data := encodeUvarint(cmdReserve, 64)
		if rng.IntN(10) == 0 {
			data = encodeAllocate(3)
		}
		log = append(log, &raft.Log{Index: i, Term: term, Type: raft.LogCommand, Data: data, AppendedAt: at})
	}
	whole := newFSM()
	for _, l := range log {
		whole.Apply(l)
	}
	for _, cut := range []int{1, 500, 1777, 2999} {
		part := newFSM()
		for _, l := range log[:cut] {
			part.Apply(l)
		}
		snap, err := part.Snapshot()
		if err != nil {
			t.Fatal(err)
		}
		var sink memSink
		if err := snap.Persist(&sink); err != nil {
			t.Fatal(err)
		}
		restored := newFSM()
		if err := restored.Restore(io.NopCloser(&sink)); err != nil {
			t.Fatal(err)
		}
		for _, l := range log[cut:] {
			restored.Apply(l)
		}
		if !reflect.DeepEqual(restored.state, whole.state) {
			t.Fatalf("restored at entry %d: state differs from the one that applied the whole log:\n%+v\n%+v", cut, restored.state.Run, whole.state.Run)
		}
	}
	if len(whole.state.Checkpoints) < 100 || whole.state.Run == nil {
		t.Fatalf("the log recorded %d checkpoints, run %v", len(whole.state.Checkpoints), whole.state.Run)
	}
}

// oldFSMState is the snapshot form of the version before checkpoints.
type oldFSMState struct {
	ClusterID string            `json:"cluster_id,omitempty"`
	Counter   int64             `json:"counter"`
	APIAddrs  map[string]string `json:"api_addrs"`
}

// TestCheckpointSnapshotCompatibility: a snapshot of the earlier version
// restores with no checkpoints, and the earlier version's decoding (the
// same json.Decoder into its state, without DisallowUnknownFields) reads a
// snapshot of this one.
func TestCheckpointSnapshotCompatibility(t *testing.T) {
	old := `{"cluster_id":"c-1","counter":42,"api_addrs":{"n1":"http://h1:7101"}}` + "\n"
	f := newFSM()
	if err := f.Restore(io.NopCloser(bytes.NewReader([]byte(old)))); err != nil {
		t.Fatalf("an old snapshot does not restore: %v", err)
	}
	if f.counter() != 42 || f.clusterID() != "c-1" || len(f.checkpoints()) != 0 {
		t.Fatalf("old snapshot restored as %+v", f.state)
	}
	applyAt(f, 10, 3, t0, encodeUvarint(cmdReserve, 8))
	applyAt(f, 11, 3, t0.Add(time.Minute), encodeUvarint(cmdReserve, 8))
	snap, _ := f.Snapshot()
	var sink memSink
	if err := snap.Persist(&sink); err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(sink.Bytes(), []byte(`"checkpoints":[{"at":`)) {
		t.Fatalf("the snapshot holds no checkpoints: %s", sink.Bytes())
	}
	var o oldFSMState
	if err := json.NewDecoder(bytes.NewReader(sink.Bytes())).Decode(&o); err != nil {
		t.Fatalf("the earlier version cannot read this snapshot: %v", err)
	}
	if o.Counter != 58 || o.ClusterID != "c-1" || o.APIAddrs["n1"] != "http://h1:7101" {
		t.Fatalf("the earlier version reads %+v", o)
	}
}

func TestCheckpointRestoreRefusesBadLists(t *testing.T) {
	for _, s := range []string{
		`{"counter":10,"checkpoints":[{"at":5,"counter":11}]}`,
		`{"counter":10,"checkpoints":[{"at":5,"counter":-1}]}`,
		`{"counter":10,"checkpoints":[{"at":5,"counter":3},{"at":5,"counter":4}]}`,
		`{"counter":10,"checkpoints":[{"at":5,"counter":3},{"at":6,"counter":2}]}`,
		`{"counter":10,"run":{"term":1,"base":11}}`,
	} {
		if err := newFSM().Restore(io.NopCloser(bytes.NewReader([]byte(s)))); err == nil {
			t.Errorf("restored %s", s)
		}
	}
}
