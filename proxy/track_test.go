package proxy

import (
	"testing"
	"time"
)

// The request tracker's limits, which the exchanges with a real server
// (TestFramesMatchDirect) do not reach.
func TestTrackerLimits(t *testing.T) {
	var tr tracker
	tr.init('I')
	// Syncs fold into one entry: a flood of them costs no memory.
	for range maxTracked * 2 {
		tr.push(request{typ: 'S'})
	}
	if tr.lost || len(tr.queue) != 1 || tr.pending != maxTracked*2 {
		t.Fatalf("after %d Syncs: lost=%v entries=%d pending=%d", maxTracked*2, tr.lost, len(tr.queue), tr.pending)
	}
	for range maxTracked * 2 {
		tr.ready('I', false)
	}
	if !tr.idle() {
		t.Fatalf("not idle after every Sync was answered")
	}
	// At the bound the frontend pump is told to wait for room; the
	// session stays tracked.
	for i := range maxTracked {
		if got := tr.push(request{typ: 'P'}); (got == pushedFull) != (i == maxTracked-1) {
			t.Fatalf("push %d of %d: %v", i+1, maxTracked, got)
		}
	}
	if tr.lost {
		t.Fatalf("lost at %d requests", maxTracked)
	}
	waited := make(chan bool)
	go func() { waited <- tr.waitRoom() }()
	tr.response('1') // one ParseComplete: room for one more
	if !<-waited {
		t.Fatal("waitRoom reported the session ended")
	}
	if got := tr.push(request{typ: 'P'}); got != pushedFull {
		t.Fatalf("push at the bound again: %v", got)
	}
	go func() { waited <- tr.waitRoom() }()
	tr.end()
	if <-waited {
		t.Fatal("waitRoom did not report the session ended")
	}
}

// An answer the model does not expect loses the session rather than
// guessing; a draining proxy then never closes it early.
func TestTrackerUnexpectedAnswer(t *testing.T) {
	for _, tc := range []struct {
		name  string
		push  []byte
		reply func(*tracker)
	}{
		{"ParseComplete for a Bind", []byte("BS"), func(t *tracker) { t.response('1') }},
		{"ReadyForQuery with nothing sent", nil, func(t *tracker) { t.ready('I', true) }},
		{"ReadyForQuery before the Execute's answer", []byte("ES"), func(t *tracker) { t.ready('I', true) }},
		{"CommandComplete for a Sync", []byte("S"), func(t *tracker) { t.commandComplete([]byte("SELECT 1\x00")) }},
		{"COPY BOTH", []byte("QS"), func(t *tracker) { t.response('W') }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var tr tracker
			tr.init('I')
			for _, typ := range tc.push {
				tr.push(request{typ: typ})
			}
			tc.reply(&tr)
			if !tr.lost || tr.closeIfIdle() {
				t.Fatalf("lost=%v after an unexpected answer", tr.lost)
			}
		})
	}
}

// Once the drain marked a session closing, nothing more is forwarded.
func TestTrackerClosing(t *testing.T) {
	var tr tracker
	tr.init('I')
	if !tr.closeIfIdle() {
		t.Fatal("an idle session was not closed")
	}
	if tr.push(request{typ: 'Q'}) != refused {
		t.Fatal("a Query was let through after the drain closed the session")
	}
}

func TestIsFenceRow(t *testing.T) {
	row := func(name string, table, typ byte) []byte {
		b := append([]byte{0, 1}, name...)
		b = append(b, 0, 0, 0, 0, table, 0, 0, 0, 0, 0, typ, 0, 8, 0xff, 0xff, 0xff, 0xff, 0, 0)
		return b
	}
	for _, tc := range []struct {
		body []byte
		want bool
	}{
		{row("fence", 0, 20), true},
		{row("fence_many", 0, 20), true},
		{row("fence", 0, 23), false},                              // int4
		{row("fence", 7, 20), false},                              // a table's column
		{row("fencex", 0, 20), false},                             // another name
		{row("f", 0, 20), false},                                  // an alias
		{append([]byte{0, 2}, row("fence", 0, 20)[2:]...), false}, // two columns
	} {
		if got := isFenceRow(tc.body); got != tc.want {
			t.Errorf("isFenceRow(%q) = %v, want %v", tc.body, got, tc.want)
		}
	}
	if got, want := selectRows([]byte("SELECT 12\x00")), 12; got != want {
		t.Errorf("selectRows = %d, want %d", got, want)
	}
	if got := selectRows([]byte("UPDATE 1\x00")); got != 0 {
		t.Errorf("selectRows(UPDATE 1) = %d", got)
	}
}

// A session whose answers the tracker lost is still timed: once the last
// ReadyForQuery said a transaction is open, came after everything the
// client sent, and nothing followed for the limit, it is closed (as lost,
// so that the proxy says nothing). A client that sent more is waited for.
func TestLostSessionIsStillTimed(t *testing.T) {
	var tr tracker
	tr.init('I')
	tr.stallLimit = 50 * time.Millisecond
	tr.push(request{typ: 'Q'})
	tr.ready('T', false)
	tr.response('1') // answers nothing the client sent
	if !tr.lost {
		t.Fatal("not lost after an unexpected answer")
	}
	var closedLost []bool
	closed := func(lost bool) { closedLost = append(closedLost, lost) }
	if wait := tr.closeIfStalled(closed); wait <= 0 || len(closedLost) != 0 {
		t.Fatalf("closed at once (wait %v, closed %v)", wait, closedLost)
	}
	tr.push(request{typ: 'Q'}) // the client sends more: its answer is awaited
	time.Sleep(60 * time.Millisecond)
	if wait := tr.closeIfStalled(closed); wait != tr.stallLimit || len(closedLost) != 0 {
		t.Fatalf("closed with a request just sent (wait %v, closed %v)", wait, closedLost)
	}
	tr.ready('T', false)
	time.Sleep(60 * time.Millisecond)
	if wait := tr.closeIfStalled(closed); wait != 0 || len(closedLost) != 1 || !closedLost[0] {
		t.Fatalf("a lost session quiet in its transaction past the limit: wait %v, closed %v", wait, closedLost)
	}
	if tr.push(request{typ: 'Q'}) != refused {
		t.Fatal("a Query was let through after the session was closed")
	}
}
