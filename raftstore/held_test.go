package raftstore

import (
	"errors"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/tokenapi"
)

// What a peer records only grows for one data directory, and starts over
// for another (a replaced member).
func TestHeldBookObserve(t *testing.T) {
	b, err := readHeld(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	run := func(dir string, term, commit uint64) NodeState {
		st := NodeState{NodeID: "n2", DataDirID: dir, Phase: PhaseRunning, HasState: true, Term: term, CommitIndex: commit}
		if commit > 0 {
			st.CommitTerm = term
		}
		return st
	}
	steps := []struct {
		st   NodeState
		grew bool
		want Held
	}{
		{run("d-a", 3, 40), true, Held{DataDirID: "d-a", Term: 3, CommitIndex: 40, CommitTerm: 3, APIAddr: "api2"}},
		// A restart: the commit index is 0 until the node learns it again.
		{run("d-a", 3, 0), false, Held{DataDirID: "d-a", Term: 3, CommitIndex: 40, CommitTerm: 3, APIAddr: "api2"}},
		{run("d-a", 4, 41), true, Held{DataDirID: "d-a", Term: 4, CommitIndex: 41, CommitTerm: 4, APIAddr: "api2"}},
		// Not running, or another node at the address: nothing recorded.
		{NodeState{NodeID: "n2", DataDirID: "d-a", Phase: PhaseJoining, Term: 9, CommitIndex: 99}, false, Held{DataDirID: "d-a", Term: 4, CommitIndex: 41, CommitTerm: 4, APIAddr: "api2"}},
		{NodeState{NodeID: "n3", DataDirID: "d-a", Phase: PhaseRunning, HasState: true, Term: 9, CommitIndex: 99}, false, Held{DataDirID: "d-a", Term: 4, CommitIndex: 41, CommitTerm: 4, APIAddr: "api2"}},
		// The member was replaced: a new directory starts low.
		{run("d-b", 5, 2), true, Held{DataDirID: "d-b", Term: 5, CommitIndex: 2, CommitTerm: 5, APIAddr: "api2"}},
	}
	for i, s := range steps {
		if got := b.observe("n2", "api2", s.st); got != s.grew {
			t.Errorf("step %d: observe = %v, want %v", i, got, s.grew)
		}
		if got := b.snapshot()["n2"]; got != s.want {
			t.Errorf("step %d: record %+v, want %+v", i, got, s.want)
		}
	}
	if err := b.save(); err != nil {
		t.Fatal(err)
	}
	again, err := readHeld(b.dir)
	if err != nil {
		t.Fatal(err)
	}
	if got := again.snapshot()["n2"]; got != steps[len(steps)-1].want {
		t.Fatalf("read back %+v", got)
	}
}

// A directory is refused when a peer saw that very directory at a higher
// term or commit index; never for another directory of the same node, nor
// for what the directory still holds.
func TestCheckRolledBack(t *testing.T) {
	self := identity{NodeID: "n2", DataDirID: "d-a"}
	cfg := &Config{ID: "n2", DataDir: "/data/n2"}
	answer := func(h Held, err error) []probeResult {
		return []probeResult{
			{peer: tokenapi.Peer{ID: "n1", APIAddr: "api1"}, err: errors.New("connection refused")},
			{peer: tokenapi.Peer{ID: "n3", APIAddr: "api3"}, err: err, st: NodeState{NodeID: "n3", Held: map[string]Held{"n2": h}}},
		}
	}
	// The directory's log: index 40 holds an entry of term 2.
	termAt := func(i uint64) (uint64, bool) { return 2, i >= 10 && i <= 90 }
	for _, c := range []struct {
		name             string
		term, last, snap uint64
		h                Held
		err              error
		refused          bool
	}{
		{"holds what was seen", 3, 40, 0, Held{DataDirID: "d-a", Term: 3, CommitIndex: 40, CommitTerm: 2}, nil, false},
		{"holds more", 4, 90, 0, Held{DataDirID: "d-a", Term: 3, CommitIndex: 40}, nil, false},
		{"log below the commit index seen", 3, 39, 0, Held{DataDirID: "d-a", Term: 3, CommitIndex: 40}, nil, true},
		{"term below the term seen", 2, 90, 0, Held{DataDirID: "d-a", Term: 3, CommitIndex: 40}, nil, true},
		{"another entry at the commit index seen", 3, 90, 0, Held{DataDirID: "d-a", Term: 3, CommitIndex: 40, CommitTerm: 3}, nil, true},
		{"the commit index seen is in the snapshot", 3, 90, 40, Held{DataDirID: "d-a", Term: 3, CommitIndex: 40, CommitTerm: 3}, nil, false},
		{"another directory of n2", 1, 1, 0, Held{DataDirID: "d-b", Term: 3, CommitIndex: 40}, nil, false},
		{"the peer does not answer", 1, 1, 0, Held{DataDirID: "d-a", Term: 3, CommitIndex: 40}, errors.New("timeout"), false},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := checkRolledBack(cfg, self, localDisk{term: c.term, last: c.last, snap: c.snap, termAt: termAt}, answer(c.h, c.err))
			if !c.refused {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if !errors.Is(err, ErrDataDirLost) || !errors.Is(err, ErrRolledBack) {
				t.Fatalf("checkRolledBack = %v; want ErrDataDirLost and ErrRolledBack", err)
			}
			if !strings.Contains(err.Error(), "n3 saw node n2") || strings.Contains(err.Error(), "\n") {
				t.Fatalf("refusal %q: want one line naming the peer that saw more", err)
			}
		})
	}
	// An answer at a peer's address from another node counts for nothing.
	wrong := []probeResult{{peer: tokenapi.Peer{ID: "n3", APIAddr: "api3"}, st: NodeState{NodeID: "n9", Held: map[string]Held{"n2": {DataDirID: "d-a", Term: 9}}}}}
	if err := checkRolledBack(cfg, self, localDisk{term: 1, last: 1}, wrong); err != nil {
		t.Fatalf("refused on the word of another node: %v", err)
	}
}

// The record follows the configuration: a removed member is forgotten.
func TestHeldBookKeepOnly(t *testing.T) {
	b, err := readHeld(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"n2", "n3"} {
		b.observe(id, "api-"+id, NodeState{NodeID: id, DataDirID: "d-" + id, Phase: PhaseRunning, HasState: true, Term: 2, CommitIndex: 9})
	}
	if b.keepOnly(map[string]bool{"n2": true, "n3": true}) {
		t.Fatal("forgot a member")
	}
	if !b.keepOnly(map[string]bool{"n2": true, "n4": true}) {
		t.Fatal("kept removed n3")
	}
	if got := b.snapshot(); len(got) != 1 || got["n2"].CommitIndex != 9 {
		t.Fatalf("record %+v; want n2 alone", got)
	}
}
