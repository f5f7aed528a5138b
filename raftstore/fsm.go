package raftstore

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"sync"

	"github.com/hashicorp/raft"
)

// Log entry types. The first byte of every command names its type.
const (
	cmdAllocate     byte = 1 // uvarint count: allocate count tokens
	cmdSetMember    byte = 2 // JSON memberMeta: record a member's API address
	cmdDelMember    byte = 3 // JSON memberMeta: forget a member's API address
	cmdSetClusterID byte = 4 // the cluster id, as text: recorded only if none is yet
	cmdRaiseCounter byte = 5 // uvarint value: raise the counter to at least value
	cmdReserve      byte = 6 // uvarint count: reserve count tokens for the leader to hand out from memory
)

// memberMeta is the metadata the FSM keeps per member besides what Raft's
// own configuration holds.
type memberMeta struct {
	ID      string `json:"id"`
	APIAddr string `json:"api_addr,omitempty"`
}

// fsmState is the whole replicated state: the cluster's id, one global
// counter, the API address of each member, and checkpoints of the counter
// over time (checkpoint.go). Its size does not depend on how many
// resources have asked for tokens.
type fsmState struct {
	ClusterID string            `json:"cluster_id,omitempty"`
	Counter   int64             `json:"counter"`
	APIAddrs  map[string]string `json:"api_addrs"`
	// Checkpoints and Run are absent from snapshots of earlier versions
	// (they restore with none), and ignored by earlier versions.
	Checkpoints []checkpoint `json:"checkpoints,omitempty"`
	Run         *reserveRun  `json:"run,omitempty"`
}

// applyResult is what FSM.Apply returns for an allocation: the first token of
// the range, and the term and index of the entry that minted it.
type applyResult struct {
	First int64
	Count int
	Term  uint64
	Index uint64
}

// raiseResult is what FSM.Apply returns for a counter raise.
type raiseResult struct {
	Before, After int64
	Term, Index   uint64
}

// fsm is the token state machine. Apply is the only place tokens are minted.
type fsm struct {
	mu    sync.RWMutex
	state fsmState
	// clusterIDSet is signalled (without blocking) when the cluster id
	// changes, so that the store records it in the data directory.
	clusterIDSet chan struct{}
	// otherMove is the index of the last applied entry that moved the
	// counter other than a reservation (an allocation or a raise): a range
	// reserved at a lower index may no longer be handed out, its tokens
	// being below ones that entry minted or promised.
	otherMove uint64
	// cut is the index before the last entry that recorded a checkpoint:
	// ranges reserved at or below it are no longer handed out either (see
	// recordCheckpointLocked). Like otherMove it is not replicated state:
	// only a leader's ranges in memory depend on it.
	cut uint64
}

func newFSM() *fsm {
	return &fsm{state: fsmState{APIAddrs: map[string]string{}}, clusterIDSet: make(chan struct{}, 1)}
}

func (f *fsm) signalClusterID() {
	select {
	case f.clusterIDSet <- struct{}{}:
	default:
	}
}

func encodeUvarint(typ byte, v uint64) []byte {
	b := make([]byte, 1, 1+binary.MaxVarintLen64)
	b[0] = typ
	return binary.AppendUvarint(b, v)
}

func encodeAllocate(n int) []byte { return encodeUvarint(cmdAllocate, uint64(n)) }

func encodeMember(typ byte, m memberMeta) []byte {
	b, _ := json.Marshal(m) // a struct of strings always marshals
	return append([]byte{typ}, b...)
}

// Apply applies one committed entry. It is deterministic: the same log gives
// the same state and the same results on every node.
func (f *fsm) Apply(l *raft.Log) any {
	if l.Type != raft.LogCommand || len(l.Data) == 0 {
		return nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	switch l.Data[0] {
	case cmdAllocate, cmdReserve:
		// A reservation is applied exactly like an allocation, relative
		// to the counter: every range lies above every range before it
		// in the log, whether its tokens are handed out at once or later
		// from the leader's memory.
		n, k := binary.Uvarint(l.Data[1:])
		if k <= 0 || n == 0 || n > math.MaxInt32 {
			return fmt.Errorf("%w: bad allocate entry at index %d", ErrCorrupt, l.Index)
		}
		left := uint64(math.MaxInt64 - f.state.Counter)
		switch {
		case left == 0:
			return fmt.Errorf("%w: the counter is at %d, the largest token, at index %d", ErrExhausted, f.state.Counter, l.Index)
		case n > left && l.Data[0] == cmdReserve:
			// The last reservation is shrunk to what remains, so that
			// every token up to the largest can be handed out.
			n = left
		case n > left:
			return fmt.Errorf("%w: %d tokens asked, %d left below the largest token %d, at index %d",
				ErrExhausted, n, left, int64(math.MaxInt64), l.Index)
		}
		first := f.state.Counter + 1
		f.state.Counter += int64(n)
		if l.Data[0] == cmdAllocate {
			f.otherMove = l.Index
		}
		f.recordCheckpointLocked(l.Index, l.Term, appendedAt(l), first-1, l.Data[0] == cmdReserve)
		return applyResult{First: first, Count: int(n), Term: l.Term, Index: l.Index}
	case cmdSetMember, cmdDelMember:
		var m memberMeta
		if err := json.Unmarshal(l.Data[1:], &m); err != nil {
			return fmt.Errorf("%w: bad member entry at index %d: %v", ErrCorrupt, l.Index, err)
		}
		if l.Data[0] == cmdSetMember {
			f.state.APIAddrs[m.ID] = m.APIAddr
		} else {
			delete(f.state.APIAddrs, m.ID)
		}
		return nil
	case cmdSetClusterID:
		// The first id committed wins: every node applies the same log,
		// so every node keeps the same one.
		if f.state.ClusterID == "" && len(l.Data) > 1 {
			f.state.ClusterID = string(l.Data[1:])
			f.signalClusterID()
		}
		return f.state.ClusterID
	case cmdRaiseCounter:
		v, k := binary.Uvarint(l.Data[1:])
		if k <= 0 || v > math.MaxInt64 {
			return fmt.Errorf("%w: bad raise entry at index %d", ErrCorrupt, l.Index)
		}
		// Never lowers the counter.
		f.otherMove = l.Index
		before := f.state.Counter
		f.state.Counter = max(before, int64(v))
		if f.state.Counter > before {
			f.recordCheckpointLocked(l.Index, l.Term, appendedAt(l), before, false)
		}
		return raiseResult{Before: before, After: f.state.Counter, Term: l.Term, Index: l.Index}
	default:
		return fmt.Errorf("%w: unknown entry type %d at index %d", ErrCorrupt, l.Data[0], l.Index)
	}
}

// appendedAt is the time the leader appended l, in Unix nanoseconds; 0 for
// an entry written before raft.Log had the field.
func appendedAt(l *raft.Log) int64 {
	if l.AppendedAt.IsZero() {
		return 0
	}
	return l.AppendedAt.UnixNano()
}

// counter returns the last token minted as seen by this node.
func (f *fsm) counter() int64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.state.Counter
}

// otherMoveIndex returns the index of the last applied allocation or raise,
// or the index before the last entry that recorded a checkpoint, whichever
// is higher: a range reserved at or below it may no longer be handed out.
func (f *fsm) otherMoveIndex() uint64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return max(f.otherMove, f.cut)
}

// clusterID returns the cluster id the log committed, or "".
func (f *fsm) clusterID() string {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.state.ClusterID
}

// apiAddrs returns a copy of the member API addresses.
func (f *fsm) apiAddrs() map[string]string {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return maps.Clone(f.state.APIAddrs)
}

// Snapshot copies the state; Persist writes it.
func (f *fsm) Snapshot() (raft.FSMSnapshot, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	st := fsmState{ClusterID: f.state.ClusterID, Counter: f.state.Counter, APIAddrs: maps.Clone(f.state.APIAddrs),
		Checkpoints: slices.Clone(f.state.Checkpoints)}
	if f.state.Run != nil {
		r := *f.state.Run
		st.Run = &r
	}
	return &fsmSnapshot{state: st}, nil
}

// Restore replaces the state with a snapshot's.
func (f *fsm) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	var s fsmState
	if err := json.NewDecoder(rc).Decode(&s); err != nil {
		return fmt.Errorf("decode snapshot: %w", err)
	}
	if s.Counter < 0 {
		// This FSM never writes one: restoring it would hand out tokens
		// again from below zero.
		return fmt.Errorf("%w: snapshot with a negative counter (%d)", ErrCorrupt, s.Counter)
	}
	if err := validCheckpoints(s.Checkpoints, s.Run, s.Counter); err != nil {
		// This FSM never writes such a list: restoring it could refuse
		// holders that are not as old as their floor says.
		return fmt.Errorf("%w: snapshot with bad checkpoints: %v", ErrCorrupt, err)
	}
	if s.APIAddrs == nil {
		s.APIAddrs = map[string]string{}
	}
	f.mu.Lock()
	changed := f.state.ClusterID != s.ClusterID
	f.state = s
	f.mu.Unlock()
	if changed {
		f.signalClusterID()
	}
	return nil
}

type fsmSnapshot struct{ state fsmState }

func (s *fsmSnapshot) Persist(sink raft.SnapshotSink) error {
	if err := json.NewEncoder(sink).Encode(s.state); err != nil {
		sink.Cancel()
		return fmt.Errorf("write snapshot: %w", err)
	}
	return sink.Close()
}

func (s *fsmSnapshot) Release() {}
