package raftstore

import (
	"context"
	"fmt"
	"time"

	"github.com/hashicorp/raft"
)

// enqueueTimeout bounds how long Apply waits for Raft to accept an entry.
const enqueueTimeout = 5 * time.Second

// Range is a run of Count consecutive tokens starting at First, minted by the
// log entry at Index in Term.
type Range struct {
	First int64
	Count int
	Term  uint64
	Index uint64
	// Leader is the ID of the node that committed the entry.
	Leader string
}

// Allocate commits one log entry that allocates n tokens and returns the
// range that FSM.Apply minted for it. Only the leader accepts it; others
// return ErrNotLeader or ErrNoLeader. A token exists only once its entry is
// committed and applied: a deposed leader's entry never commits, so it
// returns ErrLeadershipLost and mints nothing.
func (s *Store) Allocate(ctx context.Context, n int) (Range, error) {
	if n <= 0 {
		return Range{}, fmt.Errorf("%w: allocate %d tokens", ErrBadConfig, n)
	}
	if err := ctx.Err(); err != nil {
		return Range{}, err
	}
	if s.raft.State() != raft.Leader {
		return Range{}, s.notLeader()
	}
	f := s.raft.Apply(encodeAllocate(n), enqueueTimeout)
	if err := wait(ctx, f); err != nil {
		return Range{}, fmt.Errorf("allocate %d tokens: %w", n, err)
	}
	switch r := f.Response().(type) {
	case applyResult:
		return Range{First: r.First, Count: r.Count, Term: r.Term, Index: r.Index, Leader: s.cfg.ID}, nil
	case error:
		return Range{}, fmt.Errorf("allocate %d tokens: %w", n, r)
	default:
		return Range{}, fmt.Errorf("allocate %d tokens: unexpected FSM response %T", n, r)
	}
}

// apply commits a metadata command.
func (s *Store) apply(ctx context.Context, cmd []byte) error {
	if s.raft.State() != raft.Leader {
		return s.notLeader()
	}
	f := s.raft.Apply(cmd, enqueueTimeout)
	if err := wait(ctx, f); err != nil {
		return err
	}
	if err, ok := f.Response().(error); ok {
		return err
	}
	return nil
}

// Backup is the state a snapshot for disaster recovery holds: the cluster
// id and the counter, read on the leader at a log index in a term.
type Backup struct {
	ClusterID string
	Counter   int64
	Index     uint64
	Term      uint64
}

// Backup reads the replicated state on the leader after a barrier, so the
// counter is at least every token handed out before the call.
func (s *Store) Backup(ctx context.Context) (Backup, error) {
	if s.raft.State() != raft.Leader {
		return Backup{}, s.notLeader()
	}
	term := s.raft.CurrentTerm()
	if err := wait(ctx, s.raft.Barrier(enqueueTimeout)); err != nil {
		return Backup{}, fmt.Errorf("barrier before backup: %w", err)
	}
	return Backup{ClusterID: s.fsm.clusterID(), Counter: s.fsm.counter(), Index: s.raft.AppliedIndex(), Term: term}, nil
}

// Raise is the outcome of RaiseCounter.
type Raise struct {
	Before, After int64
	Term, Index   uint64
}

// RaiseCounter commits an entry that raises the counter to at least v; it
// never lowers it. Every token handed out afterwards is above v.
func (s *Store) RaiseCounter(ctx context.Context, v int64) (Raise, error) {
	if v < 0 {
		return Raise{}, fmt.Errorf("%w: raise the counter to %d", ErrBadConfig, v)
	}
	if s.raft.State() != raft.Leader {
		return Raise{}, s.notLeader()
	}
	f := s.raft.Apply(encodeUvarint(cmdRaiseCounter, uint64(v)), enqueueTimeout)
	if err := wait(ctx, f); err != nil {
		return Raise{}, fmt.Errorf("raise counter to %d: %w", v, err)
	}
	switch r := f.Response().(type) {
	case raiseResult:
		return Raise(r), nil
	case error:
		return Raise{}, fmt.Errorf("raise counter to %d: %w", v, r)
	default:
		return Raise{}, fmt.Errorf("raise counter to %d: unexpected FSM response %T", v, r)
	}
}
