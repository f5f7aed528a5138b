package raftstore

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"sync"

	"github.com/hashicorp/raft"
)

// Log entry types. The first byte of every command names its type.
const (
	cmdAllocate  byte = 1 // uvarint count: allocate count tokens
	cmdSetMember byte = 2 // JSON memberMeta: record a member's API address
	cmdDelMember byte = 3 // JSON memberMeta: forget a member's API address
)

// memberMeta is the metadata the FSM keeps per member besides what Raft's
// own configuration holds.
type memberMeta struct {
	ID      string `json:"id"`
	APIAddr string `json:"api_addr,omitempty"`
}

// fsmState is the whole replicated state: one global counter and the API
// address of each member. Its size does not depend on how many resources
// have asked for tokens.
type fsmState struct {
	Counter  int64             `json:"counter"`
	APIAddrs map[string]string `json:"api_addrs"`
}

// applyResult is what FSM.Apply returns for an allocation: the first token of
// the range, and the term and index of the entry that minted it.
type applyResult struct {
	First int64
	Count int
	Term  uint64
	Index uint64
}

// fsm is the token state machine. Apply is the only place tokens are minted.
type fsm struct {
	mu    sync.RWMutex
	state fsmState
}

func newFSM() *fsm {
	return &fsm{state: fsmState{APIAddrs: map[string]string{}}}
}

func encodeAllocate(n int) []byte {
	b := make([]byte, 1, 1+binary.MaxVarintLen64)
	b[0] = cmdAllocate
	return binary.AppendUvarint(b, uint64(n))
}

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
	case cmdAllocate:
		n, k := binary.Uvarint(l.Data[1:])
		if k <= 0 || n == 0 || n > math.MaxInt32 {
			return fmt.Errorf("%w: bad allocate entry at index %d", ErrCorrupt, l.Index)
		}
		if f.state.Counter > math.MaxInt64-int64(n) {
			return fmt.Errorf("%w at index %d", ErrExhausted, l.Index)
		}
		first := f.state.Counter + 1
		f.state.Counter += int64(n)
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
	default:
		return fmt.Errorf("%w: unknown entry type %d at index %d", ErrCorrupt, l.Data[0], l.Index)
	}
}

// counter returns the last token minted as seen by this node.
func (f *fsm) counter() int64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.state.Counter
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
	return &fsmSnapshot{state: fsmState{Counter: f.state.Counter, APIAddrs: maps.Clone(f.state.APIAddrs)}}, nil
}

// Restore replaces the state with a snapshot's.
func (f *fsm) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	var s fsmState
	if err := json.NewDecoder(rc).Decode(&s); err != nil {
		return fmt.Errorf("decode snapshot: %w", err)
	}
	if s.APIAddrs == nil {
		s.APIAddrs = map[string]string{}
	}
	f.mu.Lock()
	f.state = s
	f.mu.Unlock()
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
