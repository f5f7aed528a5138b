package raftstore

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/fencegate/fencegate/tokenapi"
)

// noPeers is the Confirmer of a single-node cluster: the leader's own
// answer is the majority, so it is never asked.
type noPeers struct{}

func (noPeers) View(context.Context, tokenapi.Peer) (View, error) {
	return View{}, errors.New("a single-node cluster asks no one")
}

// A reservation is applied like an allocation, relative to the counter; an
// allocation or a raise after it marks the range as overtaken.
func TestFSMReserve(t *testing.T) {
	f := newFSM()
	r := applyCmd(f, 1, encodeUvarint(cmdReserve, 100)).(applyResult)
	if r.First != 1 || r.Count != 100 || f.counter() != 100 || f.otherMoveIndex() != 0 {
		t.Fatalf("reserve 100 = %+v, counter %d, other move %d", r, f.counter(), f.otherMoveIndex())
	}
	a := applyCmd(f, 2, encodeAllocate(5)).(applyResult)
	if a.First != 101 || f.otherMoveIndex() != 2 {
		t.Fatalf("allocate after a reservation = %+v, other move %d", a, f.otherMoveIndex())
	}
	r = applyCmd(f, 3, encodeUvarint(cmdReserve, 10)).(applyResult)
	if r.First != 106 || f.otherMoveIndex() != 2 {
		t.Fatalf("second reserve = %+v, other move %d", r, f.otherMoveIndex())
	}
	applyCmd(f, 4, encodeUvarint(cmdRaiseCounter, 1000))
	if f.otherMoveIndex() != 4 || f.counter() != 1000 {
		t.Fatalf("raise: other move %d, counter %d", f.otherMoveIndex(), f.counter())
	}
	if err, ok := applyCmd(f, 5, []byte{cmdReserve}).(error); !ok || !errors.Is(err, ErrCorrupt) {
		t.Fatalf("a reserve entry without a count = %v; want ErrCorrupt", err)
	}
}

// The read-index path hands out consecutive increasing tokens from one
// reservation, reserves the next range before the first runs out, drops
// its range when a raise overtakes it, and after a restart every token is
// above every reservation in the log.
func TestReadIndexSingleNode(t *testing.T) {
	dir := t.TempDir()
	s := singleNode(t, dir, "", true)
	addr := s.RaftAddr()
	ri := NewReadIndex(s, noPeers{}, ReadIndexConfig{ReserveSize: 10})
	ctx := context.Background()
	var last int64
	for i := range 25 {
		r, err := ri.Alloc(ctx, 2)
		if err != nil {
			t.Fatalf("Alloc #%d: %v", i, err)
		}
		if r.Count != 2 || r.First <= last || r.Leader != "n1" {
			t.Fatalf("Alloc #%d = %+v after token %d", i, r, last)
		}
		last = r.First + 1
	}
	st := ri.Stats()
	if st.Rounds != 25 || st.RoundFailures != 0 || st.Reservations < 5 {
		t.Fatalf("stats after 25 allocations = %+v", st)
	}
	// A raise overtakes the held range: the next token is above it.
	if _, err := s.RaiseCounter(ctx, last+1000); err != nil {
		t.Fatal(err)
	}
	r, err := ri.Alloc(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if r.First <= last+1000 {
		t.Fatalf("token after raising the counter to %d = %d", last+1000, r.First)
	}
	reservedTop := s.LastToken()
	if reservedTop < r.First {
		t.Fatalf("counter %d below the token %d handed out", reservedTop, r.First)
	}
	// A crash and a restart: the log replays every reservation whole.
	ri.Close()
	s.Kill()
	s = singleNode(t, dir, addr, false)
	defer s.Close()
	testutil.Eventually(t, 10*time.Second, "log replayed", func() bool { return s.LastToken() >= reservedTop })
	ri = NewReadIndex(s, noPeers{}, ReadIndexConfig{ReserveSize: 10})
	defer ri.Close()
	r, err = ri.Alloc(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if r.First <= reservedTop {
		t.Fatalf("first token after the restart %d <= %d, the top of the reservations before it", r.First, reservedTop)
	}
	// A request larger than a reservation gets a range of its own.
	if r, err = ri.Alloc(ctx, 50); err != nil || r.Count != 50 {
		t.Fatalf("Alloc(50) with reservations of 10 = %+v, %v", r, err)
	}
}

// A node that does not lead hands out nothing.
func TestReadIndexNotLeader(t *testing.T) {
	s := singleNode(t, t.TempDir(), "", true)
	ri := NewReadIndex(s, noPeers{}, ReadIndexConfig{})
	ri.Close()
	s.Close()
	if _, err := ri.Alloc(context.Background(), 1); err == nil {
		t.Fatal("Alloc on a closed store succeeded")
	}
}
