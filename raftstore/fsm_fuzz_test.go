package raftstore

import (
	"bytes"
	"errors"
	"io"
	"math"
	"reflect"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// entries splits a fuzz input into commands: each is a length byte and
// that many bytes (fewer at the end of the input).
func entries(data []byte) [][]byte {
	var out [][]byte
	for len(data) > 0 {
		n := min(int(data[0]), len(data)-1)
		out = append(out, data[1:1+n])
		data = data[1+n:]
	}
	return out
}

// entry frames one command for entries.
func entry(cmd []byte) []byte { return append([]byte{byte(len(cmd))}, cmd...) }

// FuzzFSMApply applies any sequence of commands: Apply never panics, the
// counter never goes down nor below zero, an allocation or reservation
// returns the range just above the counter it found, and every other
// answer is nil, the cluster id, a raise, or an ErrCorrupt or
// ErrExhausted error. Entries carry leader times 40s apart (every other
// one without a time, as an earlier version wrote them): the checkpoints
// stay ordered, non-decreasing and at most the counter, and a snapshot
// taken half-way and restored applies the rest of the log to the same
// state.
func FuzzFSMApply(f *testing.F) {
	f.Add(entry(encodeAllocate(3)))
	f.Add(append(entry(encodeUvarint(cmdReserve, 65536)), entry(encodeUvarint(cmdRaiseCounter, 1<<40))...))
	f.Add(append(entry(encodeMember(cmdSetMember, memberMeta{ID: "n1", APIAddr: "http://h1:7101"})), entry(encodeMember(cmdDelMember, memberMeta{ID: "n1"}))...))
	f.Add(entry(append([]byte{cmdSetClusterID}, "c-0123"...)))
	f.Add(append(entry(encodeUvarint(cmdRaiseCounter, math.MaxInt64-1)), entry(encodeAllocate(2))...))
	f.Add(entry([]byte{cmdAllocate, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}))
	f.Add(entry([]byte{cmdSetMember, '{'}))
	f.Add(entry([]byte{99}))
	var many []byte
	for range 12 {
		many = append(many, entry(encodeUvarint(cmdReserve, 100))...)
	}
	f.Add(append(many, entry(encodeAllocate(5))...))
	f.Fuzz(func(t *testing.T, data []byte) {
		fs := newFSM()
		cmds := entries(data)
		logs := make([]*raft.Log, len(cmds))
		for i, cmd := range cmds {
			logs[i] = &raft.Log{Index: uint64(i + 1), Term: 1 + uint64(i/7), Type: raft.LogCommand, Data: cmd}
			if i%2 == 0 {
				logs[i].AppendedAt = t0.Add(time.Duration(i) * 40 * time.Second)
			}
		}
		var half *memSink
		for i, cmd := range cmds {
			if i == len(cmds)/2 {
				snap, err := fs.Snapshot()
				if err != nil {
					t.Fatal(err)
				}
				half = &memSink{}
				if err := snap.Persist(half); err != nil {
					t.Fatal(err)
				}
			}
			before := fs.counter()
			res := fs.Apply(logs[i])
			after := fs.counter()
			if err := validCheckpoints(fs.state.Checkpoints, fs.state.Run, after); err != nil {
				t.Fatalf("entry %d (%x): %v", i, cmd, err)
			}
			if after < before || after < 0 {
				t.Fatalf("entry %d (%x) moved the counter from %d to %d", i, cmd, before, after)
			}
			switch r := res.(type) {
			case nil, string:
			case applyResult:
				if r.First != before+1 || r.Count <= 0 || after != before+int64(r.Count) {
					t.Fatalf("entry %d (%x): range %+v from counter %d to %d", i, cmd, r, before, after)
				}
			case raiseResult:
				if r.Before != before || r.After != after {
					t.Fatalf("entry %d (%x): raise %+v, counter %d to %d", i, cmd, r, before, after)
				}
			case error:
				if !errors.Is(r, ErrCorrupt) && !errors.Is(r, ErrExhausted) {
					t.Fatalf("entry %d (%x): error %v is neither ErrCorrupt nor ErrExhausted", i, cmd, r)
				}
				if after != before {
					t.Fatalf("entry %d (%x) failed (%v) but moved the counter from %d to %d", i, cmd, r, before, after)
				}
			default:
				t.Fatalf("entry %d (%x): unexpected answer %T %v", i, cmd, res, res)
			}
		}
		if half == nil {
			return
		}
		again := newFSM()
		if err := again.Restore(io.NopCloser(half)); err != nil {
			t.Fatalf("the snapshot taken half-way does not restore: %v", err)
		}
		for _, l := range logs[len(cmds)/2:] {
			again.Apply(l)
		}
		// (The cluster id is left out: JSON replaces bytes that are not
		// UTF-8, and real ids are.)
		if again.counter() != fs.counter() || !reflect.DeepEqual(again.checkpoints(), fs.checkpoints()) || !reflect.DeepEqual(again.state.Run, fs.state.Run) {
			t.Fatalf("restored half-way, the log ends in another state:\n%+v\n%+v", again.state, fs.state)
		}
	})
}

// FuzzFSMRestore restores any bytes as a snapshot: Restore never panics, a
// snapshot it accepts holds a counter of zero or more and valid
// checkpoints, and the state it restored, checkpoints included, survives
// Snapshot, Persist and Restore unchanged.
func FuzzFSMRestore(f *testing.F) {
	f.Add([]byte(`{"cluster_id":"c-1","counter":42,"api_addrs":{"n1":"http://h1:7101"}}`))
	f.Add([]byte(`{"counter":-5}`))
	f.Add([]byte(`{"counter":9223372036854775807,"api_addrs":null}`))
	f.Add([]byte(`{"counter":1e400}`))
	f.Add([]byte(`{"counter":42,"checkpoints":[{"at":1,"counter":3},{"at":60000000001,"counter":40}],"run":{"term":2,"base":40}}`))
	f.Add([]byte(`{"counter":42,"checkpoints":[{"at":1,"counter":43}]}`))
	f.Add([]byte(`[]`))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		fs := newFSM()
		if err := fs.Restore(io.NopCloser(bytes.NewReader(data))); err != nil {
			return
		}
		if c := fs.counter(); c < 0 {
			t.Fatalf("restored a counter of %d from %q", c, data)
		}
		if err := validCheckpoints(fs.state.Checkpoints, fs.state.Run, fs.counter()); err != nil {
			t.Fatalf("restored bad checkpoints from %q: %v", data, err)
		}
		snap, err := fs.Snapshot()
		if err != nil {
			t.Fatal(err)
		}
		var sink memSink
		if err := snap.Persist(&sink); err != nil {
			t.Fatal(err)
		}
		again := newFSM()
		if err := again.Restore(io.NopCloser(&sink)); err != nil {
			t.Fatalf("a persisted snapshot of %q does not restore: %v", data, err)
		}
		if again.counter() != fs.counter() || again.clusterID() != fs.clusterID() || len(again.apiAddrs()) != len(fs.apiAddrs()) ||
			!reflect.DeepEqual(again.checkpoints(), fs.checkpoints()) || !reflect.DeepEqual(again.state.Run, fs.state.Run) {
			t.Fatalf("round trip of %q changed the state: %+v, then %+v", data, fs.state, again.state)
		}
	})
}
