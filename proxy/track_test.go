package proxy

import "testing"

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
	// Requests past the bound are not tracked: the session is lost, never
	// idle, and stays so.
	for range maxTracked + 1 {
		tr.push(request{typ: 'P'})
	}
	if !tr.lost || tr.queue != nil {
		t.Fatalf("past %d requests: lost=%v entries=%d", maxTracked, tr.lost, len(tr.queue))
	}
	tr.response('1')
	tr.ready('I', true)
	if tr.idle() || tr.closeIfIdle() {
		t.Fatalf("a lost session counts as idle")
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
	if tr.push(request{typ: 'Q'}) {
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
