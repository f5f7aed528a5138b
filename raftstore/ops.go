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

// Join adds srv as a voter. It is idempotent: a server already present with
// the same ID and address is left alone (its API address is refreshed); one
// that matches only by ID or only by address is removed first and re-added.
// Only the leader accepts it.
func (s *Store) Join(ctx context.Context, srv Server) error {
	if srv.ID == "" || srv.RaftAddr == "" {
		return fmt.Errorf("%w: join needs an id and a raft address", ErrBadConfig)
	}
	if s.raft.State() != raft.Leader {
		return s.notLeader()
	}
	cf := s.raft.GetConfiguration()
	if err := cf.Error(); err != nil {
		return fmt.Errorf("read configuration: %w", translate(err))
	}
	present := false
	for _, cur := range cf.Configuration().Servers {
		sameID, sameAddr := cur.ID == raft.ServerID(srv.ID), cur.Address == raft.ServerAddress(srv.RaftAddr)
		switch {
		case sameID && sameAddr && cur.Suffrage == raft.Voter:
			present = true
		case sameID || sameAddr:
			if err := wait(ctx, s.raft.RemoveServer(cur.ID, 0, 0)); err != nil {
				return fmt.Errorf("remove stale server %s: %w", cur.ID, err)
			}
		}
	}
	if !present {
		if err := wait(ctx, s.raft.AddVoter(raft.ServerID(srv.ID), raft.ServerAddress(srv.RaftAddr), 0, 0)); err != nil {
			return fmt.Errorf("add voter %s: %w", srv.ID, err)
		}
		s.log.Info("added voter", "id", srv.ID, "raft_addr", srv.RaftAddr)
	}
	if srv.APIAddr != "" && s.fsm.apiAddrs()[srv.ID] != srv.APIAddr {
		if err := s.apply(ctx, encodeMember(cmdSetMember, memberMeta{ID: srv.ID, APIAddr: srv.APIAddr})); err != nil {
			return fmt.Errorf("record api address of %s: %w", srv.ID, err)
		}
	}
	return nil
}

// Remove removes the server with this ID from the cluster. Removing a server
// that is not a member succeeds. Only the leader accepts it.
func (s *Store) Remove(ctx context.Context, id string) error {
	if s.raft.State() != raft.Leader {
		return s.notLeader()
	}
	cf := s.raft.GetConfiguration()
	if err := cf.Error(); err != nil {
		return fmt.Errorf("read configuration: %w", translate(err))
	}
	for _, cur := range cf.Configuration().Servers {
		if cur.ID == raft.ServerID(id) {
			if err := wait(ctx, s.raft.RemoveServer(cur.ID, 0, 0)); err != nil {
				return fmt.Errorf("remove server %s: %w", id, err)
			}
			s.log.Info("removed server", "id", id)
		}
	}
	if _, ok := s.fsm.apiAddrs()[id]; ok {
		if err := s.apply(ctx, encodeMember(cmdDelMember, memberMeta{ID: id})); err != nil {
			return fmt.Errorf("forget api address of %s: %w", id, err)
		}
	}
	return nil
}

// watchLeadership records member API addresses whenever this node becomes
// leader: its own, and those of the bootstrap voters it knows from its
// identity file that the replicated state does not have yet.
func (s *Store) watchLeadership() {
	defer s.wg.Done()
	for {
		select {
		case <-s.done:
			return
		case leader := <-s.notify:
			if leader {
				s.syncMembers()
			}
		}
	}
}

func (s *Store) syncMembers() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	go func() {
		select {
		case <-s.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	want := map[string]string{}
	for _, p := range s.ident.Peers {
		want[p.ID] = p.APIAddr
	}
	if s.cfg.APIAddr != "" {
		want[s.cfg.ID] = s.cfg.APIAddr
	}
	have := s.fsm.apiAddrs()
	for id, api := range want {
		if api == "" || (have[id] != "" && id != s.cfg.ID) || have[id] == api {
			continue
		}
		if err := s.apply(ctx, encodeMember(cmdSetMember, memberMeta{ID: id, APIAddr: api})); err != nil {
			s.log.Info("record member api address", "id", id, "err", err)
			return
		}
	}
}
