package proxy

import (
	"testing"
	"time"
)

// TestTrackAwaitsClient: the states in which the server owes the client
// nothing and waits on it, and those in which it owes an answer.
func TestTrackAwaitsClient(t *testing.T) {
	newT := func() *tracker {
		var tr tracker
		tr.init('T')
		return &tr
	}
	check := func(name string, tr *tracker, want bool) {
		t.Helper()
		if got := tr.awaitsClient(); got != want {
			t.Errorf("%s: awaitsClient = %v, want %v", name, got, want)
		}
	}
	tr := newT()
	tr.push(request{typ: 'P'})
	check("Parse not answered", tr, false)
	tr.response('1')
	check("Parse answered, no Sync", tr, true)
	tr.push(request{typ: 'c'}) // CopyDone outside a COPY: dropped unanswered
	check("and a stray CopyDone", tr, true)
	tr.push(request{typ: 'S'})
	check("Sync sent", tr, false)

	tr = newT()
	tr.push(request{typ: 'P'})
	tr.push(request{typ: 'B'})
	tr.push(request{typ: 'E'})
	tr.response('1')
	tr.response('2')
	tr.errorResponse()
	check("error in an unsynced batch", tr, true)
	tr.push(request{typ: 'S'})
	check("its Sync sent", tr, false)

	tr = newT()
	tr.push(request{typ: 'Q'})
	tr.response('G')
	check("COPY FROM STDIN waiting for data", tr, true)
	tr.push(request{typ: 'c'})
	check("CopyDone sent", tr, false)

	tr = newT()
	tr.push(request{typ: 'Q'})
	check("Query running", tr, false)
	tr.receiving = true
	check("a large Query half received, nothing before it", tr, true)
	tr.receiving = false
	tr.push(request{typ: 'Q'})
	tr.receiving = true
	check("a large Query half received behind one running", tr, false)
}

// TestTrackChecksClientOnlyInTheSameRead: the limit runs from the first
// check that saw the client read in progress; a read done in between (a
// different counter) starts it again, and no read in progress stops it.
func TestTrackChecksClientOnlyInTheSameRead(t *testing.T) {
	var tr tracker
	tr.init('T')
	tr.stallLimit = 40 * time.Millisecond
	tr.push(request{typ: 'P'})
	tr.response('1')
	closed := 0
	onClose := func(lost bool) { closed++ }
	tr.checkClient(1, 0, onClose)
	time.Sleep(50 * time.Millisecond)
	tr.checkClient(3, 0, onClose) // another read
	tr.checkClient(4, 0, onClose) // none in progress
	time.Sleep(50 * time.Millisecond)
	tr.checkClient(5, 0, onClose)
	if closed != 0 {
		t.Fatalf("closed with the client reading again (%d)", closed)
	}
	time.Sleep(50 * time.Millisecond)
	if wait := tr.checkClient(5, 0, onClose); wait != 0 || closed != 1 || tr.stalledOnClient != "read" || !tr.closing {
		t.Fatalf("same read past the limit: wait %v, closed %d, on %q", wait, closed, tr.stalledOnClient)
	}
}
