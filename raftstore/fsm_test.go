package raftstore

import (
	"bytes"
	"errors"
	"io"
	"reflect"
	"testing"

	"github.com/hashicorp/raft"
)

// memSink is a raft.SnapshotSink in memory.
type memSink struct {
	bytes.Buffer
	cancelled bool
}

func (s *memSink) ID() string    { return "mem" }
func (s *memSink) Cancel() error { s.cancelled = true; return nil }
func (s *memSink) Close() error  { return nil }

func applyCmd(f *fsm, index uint64, data []byte) any {
	return f.Apply(&raft.Log{Index: index, Term: 1, Type: raft.LogCommand, Data: data})
}

func TestFSMAllocatesRanges(t *testing.T) {
	f := newFSM()
	r1 := applyCmd(f, 1, encodeAllocate(3)).(applyResult)
	r2 := applyCmd(f, 2, encodeAllocate(1)).(applyResult)
	if got, want := r1, (applyResult{First: 1, Count: 3, Term: 1, Index: 1}); got != want {
		t.Fatalf("first allocation = %+v, want %+v", got, want)
	}
	if got, want := r2.First, int64(4); got != want {
		t.Fatalf("second allocation starts at %d, want %d", got, want)
	}
	if got := f.counter(); got != 4 {
		t.Fatalf("counter = %d, want 4", got)
	}
}

func TestFSMRejectsBadEntries(t *testing.T) {
	f := newFSM()
	for _, data := range [][]byte{{cmdAllocate}, {cmdAllocate, 0}, {cmdSetMember, '{'}, {99}} {
		if err, ok := applyCmd(f, 1, data).(error); !ok || !errors.Is(err, ErrCorrupt) {
			t.Errorf("Apply(%v) = %v, want ErrCorrupt", data, err)
		}
	}
	if got := f.counter(); got != 0 {
		t.Fatalf("counter after bad entries = %d, want 0", got)
	}
}

func TestFSMSnapshotRestore(t *testing.T) {
	f := newFSM()
	applyAt(f, 1, 1, t0, encodeAllocate(41)) // records the checkpoint (t0, 0)
	applyCmd(f, 2, encodeMember(cmdSetMember, memberMeta{ID: "n1", APIAddr: "http://127.0.0.1:7101"}))
	applyCmd(f, 3, encodeMember(cmdSetMember, memberMeta{ID: "n2", APIAddr: "http://127.0.0.1:7102"}))
	applyCmd(f, 4, encodeMember(cmdDelMember, memberMeta{ID: "n2"}))
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	// Applying after Snapshot must not change what Persist writes.
	applyCmd(f, 5, encodeAllocate(1))
	var sink memSink
	if err := snap.Persist(&sink); err != nil {
		t.Fatal(err)
	}
	snap.Release()

	g := newFSM()
	if err := g.Restore(io.NopCloser(&sink)); err != nil {
		t.Fatal(err)
	}
	if got := g.counter(); got != 41 {
		t.Fatalf("restored counter = %d, want 41", got)
	}
	if got := g.apiAddrs(); len(got) != 1 || got["n1"] != "http://127.0.0.1:7101" {
		t.Fatalf("restored api addrs = %v", got)
	}
	if got, want := g.checkpoints(), []checkpoint{{At: t0.UnixNano(), Counter: 0}}; !reflect.DeepEqual(got, want) {
		t.Fatalf("restored checkpoints = %v, want %v", got, want)
	}
	if r := applyCmd(g, 6, encodeAllocate(1)).(applyResult); r.First != 42 {
		t.Fatalf("allocation after restore starts at %d, want 42", r.First)
	}
}

func BenchmarkFSMApply(b *testing.B) {
	f := newFSM()
	data := encodeAllocate(64)
	var i uint64
	for b.Loop() {
		i++
		applyCmd(f, i, data)
	}
}
