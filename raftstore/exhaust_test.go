package raftstore

import (
	"context"
	"errors"
	"math"
	"testing"
)

// At the top of the counter a reservation is shrunk to what remains, an
// allocation of more than remains is refused, and nothing goes past
// math.MaxInt64.
func TestFSMCounterTop(t *testing.T) {
	f := newFSM()
	applyCmd(f, 1, encodeUvarint(cmdRaiseCounter, math.MaxInt64-10))
	if err, ok := applyCmd(f, 2, encodeAllocate(11)).(error); !ok || !errors.Is(err, ErrExhausted) {
		t.Fatalf("allocate 11 with 10 left = %v; want ErrExhausted", err)
	}
	if got := f.counter(); got != math.MaxInt64-10 {
		t.Fatalf("a refused allocation moved the counter to %d", got)
	}
	a := applyCmd(f, 3, encodeAllocate(4)).(applyResult)
	if a.First != math.MaxInt64-9 || a.Count != 4 {
		t.Fatalf("allocate 4 with 10 left = %+v", a)
	}
	r := applyCmd(f, 4, encodeUvarint(cmdReserve, 65536)).(applyResult)
	if r.First != math.MaxInt64-5 || r.Count != 6 || f.counter() != math.MaxInt64 {
		t.Fatalf("reserve 65536 with 6 left = %+v, counter %d; want the 6 left", r, f.counter())
	}
	for i, cmd := range [][]byte{encodeAllocate(1), encodeUvarint(cmdReserve, 1)} {
		if err, ok := applyCmd(f, uint64(5+i), cmd).(error); !ok || !errors.Is(err, ErrExhausted) {
			t.Fatalf("entry %x at the largest token = %v; want ErrExhausted", cmd, err)
		}
	}
	if got := f.counter(); got != math.MaxInt64 {
		t.Fatalf("counter %d after refusals at the top", got)
	}
}

// On the read-index path every token up to math.MaxInt64 is handed out,
// with a reservation larger than what remains; a request for more tokens
// than remain gets ErrExhausted and leaves them to smaller requests; once
// the last one is out, every request gets ErrExhausted.
func TestReadIndexReachesLargestToken(t *testing.T) {
	s := singleNode(t, t.TempDir(), "", true)
	defer s.Close()
	ctx := context.Background()
	if _, err := s.RaiseCounter(ctx, math.MaxInt64-25); err != nil {
		t.Fatal(err)
	}
	ri := NewReadIndex(s, noPeers{}, ReadIndexConfig{ReserveSize: 16})
	defer ri.Close()
	want := int64(math.MaxInt64 - 24)
	for want <= math.MaxInt64-3 {
		r, err := ri.Alloc(ctx, 1)
		if err != nil {
			t.Fatalf("Alloc(1) for token %d: %v", want, err)
		}
		if r.First != want {
			t.Fatalf("Alloc(1) = %d, want %d", r.First, want)
		}
		want++
	}
	// Three left: a request for four is refused and takes none of them.
	if _, err := ri.Alloc(ctx, 4); !errors.Is(err, ErrExhausted) {
		t.Fatalf("Alloc(4) with 3 left = %v; want ErrExhausted", err)
	}
	r, err := ri.Alloc(ctx, 2)
	if err != nil || r.First != math.MaxInt64-2 || r.Count != 2 {
		t.Fatalf("Alloc(2) with 3 left = %+v, %v", r, err)
	}
	if r, err = ri.Alloc(ctx, 1); err != nil || r.First != math.MaxInt64 {
		t.Fatalf("Alloc(1) for the largest token = %+v, %v", r, err)
	}
	for range 3 {
		if r, err := ri.Alloc(ctx, 1); !errors.Is(err, ErrExhausted) {
			t.Fatalf("Alloc(1) after the largest token = %+v, %v; want ErrExhausted", r, err)
		}
	}
	// The commit path too.
	if r, err := s.Allocate(ctx, 1); !errors.Is(err, ErrExhausted) {
		t.Fatalf("Allocate(1) after the largest token = %+v, %v; want ErrExhausted", r, err)
	}
}
