package raftstore

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/fencegate/fencegate/tokenapi"
	"github.com/hashicorp/raft"
)

// configuration returns the latest Raft configuration with API addresses.
func (s *Store) members() ([]tokenapi.Member, error) {
	cf := s.raft.GetConfiguration()
	if err := cf.Error(); err != nil {
		return nil, fmt.Errorf("read configuration: %w", translate(err))
	}
	_, lid := s.raft.LeaderWithID()
	apis := s.fsm.apiAddrs()
	var out []tokenapi.Member
	for _, srv := range cf.Configuration().Servers {
		id := string(srv.ID)
		api := apis[id]
		if api == "" {
			api = s.apiAddr(id)
		}
		out = append(out, tokenapi.Member{ID: id, RaftAddr: string(srv.Address), APIAddr: api, Suffrage: srv.Suffrage.String(), Leader: srv.ID == lid})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// Configuration returns the membership as the leader has committed it: the
// configuration is read first and a barrier entry is committed after, so
// the configuration read is committed too (hashicorp/raft allows one
// configuration change at a time). Only the leader answers.
func (s *Store) Configuration(ctx context.Context) (Configuration, error) {
	if s.raft.State() != raft.Leader {
		return Configuration{}, s.notLeader()
	}
	ms, err := s.members()
	if err != nil {
		return Configuration{}, err
	}
	if err := wait(ctx, s.raft.Barrier(enqueueTimeout)); err != nil {
		return Configuration{}, fmt.Errorf("confirm configuration: %w", err)
	}
	return Configuration{ClusterID: s.fsm.clusterID(), LeaderID: s.cfg.ID, Members: ms}, nil
}

// AddNonvoter adds srv as a non-voter and records its API address. A new
// member starts as a non-voter and is promoted (Promote) once it has caught
// up. Adding a member already present as a non-voter with the same
// addresses does nothing. Refused, with ErrConflict: an id that is already
// a voter (remove it first), an id present at another Raft address, and a
// Raft or API address that belongs to another member. Only the leader
// accepts it.
func (s *Store) AddNonvoter(ctx context.Context, srv tokenapi.Peer) error {
	if srv.ID == "" || srv.RaftAddr == "" || srv.APIAddr == "" {
		return fmt.Errorf("%w: a new member needs an id, a raft address and an api address", ErrBadConfig)
	}
	if s.raft.State() != raft.Leader {
		return s.notLeader()
	}
	ms, err := s.members()
	if err != nil {
		return err
	}
	present := false
	for _, m := range ms {
		sameID, sameAddr := m.ID == srv.ID, m.RaftAddr == srv.RaftAddr
		switch {
		case sameID && m.Suffrage == "Voter":
			return fmt.Errorf("%w: %s is already a voter at %s; to replace it, remove it first", ErrConflict, m.ID, m.RaftAddr)
		case sameID && !sameAddr:
			return fmt.Errorf("%w: %s is already a member at raft address %s; remove it first to add it at %s", ErrConflict, m.ID, m.RaftAddr, srv.RaftAddr)
		case !sameID && sameAddr:
			return fmt.Errorf("%w: raft address %s belongs to member %s; remove %s first or use another address", ErrConflict, srv.RaftAddr, m.ID, m.ID)
		case sameID:
			present = true
		}
	}
	apis := s.fsm.apiAddrs()
	for id, api := range apis {
		if id != srv.ID && api == srv.APIAddr {
			return fmt.Errorf("%w: api address %s belongs to member %s", ErrConflict, srv.APIAddr, id)
		}
	}
	if present && apis[srv.ID] != "" && apis[srv.ID] != srv.APIAddr {
		return fmt.Errorf("%w: %s is already a member with api address %s; only the member itself changes it (restart it with its new API address)", ErrConflict, srv.ID, apis[srv.ID])
	}
	if !present {
		if err := wait(ctx, s.raft.AddNonvoter(raft.ServerID(srv.ID), raft.ServerAddress(srv.RaftAddr), 0, 0)); err != nil {
			return fmt.Errorf("add non-voter %s: %w", srv.ID, err)
		}
		s.log.Info("added non-voter", "id", srv.ID, "raft_addr", srv.RaftAddr, "api_addr", srv.APIAddr)
	}
	if apis[srv.ID] != srv.APIAddr {
		if err := s.apply(ctx, encodeMember(cmdSetMember, memberMeta{ID: srv.ID, APIAddr: srv.APIAddr})); err != nil {
			return fmt.Errorf("record api address of %s: %w", srv.ID, err)
		}
	}
	return nil
}

// Promote makes the non-voter id a voter. The caller decides that it has
// caught up. Promoting a voter does nothing. Only the leader accepts it.
func (s *Store) Promote(ctx context.Context, id string) error {
	if s.raft.State() != raft.Leader {
		return s.notLeader()
	}
	ms, err := s.members()
	if err != nil {
		return err
	}
	for _, m := range ms {
		if m.ID != id {
			continue
		}
		if m.Suffrage == "Voter" {
			return nil
		}
		if err := wait(ctx, s.raft.AddVoter(raft.ServerID(id), raft.ServerAddress(m.RaftAddr), 0, 0)); err != nil {
			return fmt.Errorf("promote %s: %w", id, err)
		}
		s.log.Info("promoted to voter", "id", id)
		return nil
	}
	return fmt.Errorf("%w: %s is not a member", ErrConflict, id)
}

// Remove removes the member id. Removing a voter is refused with
// ErrQuorumAtRisk when fewer of the remaining voters are live than a quorum
// of them needs: the cluster would stop, and a mistyped id would remove a
// live voter while a dead one stays. live names the voters the caller found
// answering and following this leader; the leader always counts as live.
// Removing a node that is not a member succeeds. Only the leader accepts it.
func (s *Store) Remove(ctx context.Context, id string, live map[string]bool) error {
	if s.raft.State() != raft.Leader {
		return s.notLeader()
	}
	ms, err := s.members()
	if err != nil {
		return err
	}
	var target *tokenapi.Member
	var rest, alive, dead []string
	for i, m := range ms {
		if m.ID == id {
			target = &ms[i]
			continue
		}
		if m.Suffrage != "Voter" {
			continue
		}
		rest = append(rest, m.ID)
		if m.ID == s.cfg.ID || live[m.ID] {
			alive = append(alive, m.ID)
		} else {
			dead = append(dead, m.ID)
		}
	}
	if target != nil && target.Suffrage == "Voter" {
		quorum := len(rest)/2 + 1
		switch {
		case len(rest) == 0:
			return fmt.Errorf("%w: %s is the last voter; a cluster cannot remove its last voter", ErrQuorumAtRisk, id)
		case len(alive) < quorum:
			return fmt.Errorf("%w: removing %s would leave the voters %s, of which only %s answer, fewer than the %d a quorum of them needs, and the cluster would stop; bring %s back first, or, if %s is lost, remove it instead",
				ErrQuorumAtRisk, id, strings.Join(rest, ", "), orNone(alive), quorum, strings.Join(dead, ", "), strings.Join(dead, ", "))
		}
	}
	// The API address first: a leader that removes itself cannot write
	// after the removal.
	if _, ok := s.fsm.apiAddrs()[id]; ok {
		if err := s.apply(ctx, encodeMember(cmdDelMember, memberMeta{ID: id})); err != nil {
			return fmt.Errorf("forget api address of %s: %w", id, err)
		}
	}
	if target != nil {
		if err := wait(ctx, s.raft.RemoveServer(raft.ServerID(id), 0, 0)); err != nil {
			return fmt.Errorf("remove %s: %w", id, err)
		}
		s.log.Info("removed member", "id", id, "suffrage", target.Suffrage)
	}
	return nil
}

func orNone(l []string) string {
	if len(l) == 0 {
		return "none"
	}
	return strings.Join(l, ", ")
}

// SetAPIAddr records member id's API address. It is the path by which a
// member publishes its own address when it starts or when the address
// changes (the caller checks that it is the member itself). Refused with
// ErrConflict for a node that is not a member and for an address that
// belongs to another member. Only the leader accepts it.
func (s *Store) SetAPIAddr(ctx context.Context, id, api string) error {
	if id == "" || api == "" {
		return fmt.Errorf("%w: an api address needs a member id and an address", ErrBadConfig)
	}
	if s.raft.State() != raft.Leader {
		return s.notLeader()
	}
	ms, err := s.members()
	if err != nil {
		return err
	}
	member := false
	for _, m := range ms {
		member = member || m.ID == id
	}
	if !member {
		return fmt.Errorf("%w: %s is not a member", ErrConflict, id)
	}
	apis := s.fsm.apiAddrs()
	for other, a := range apis {
		if other != id && a == api {
			return fmt.Errorf("%w: api address %s belongs to member %s", ErrConflict, api, other)
		}
	}
	if apis[id] == api {
		return nil
	}
	if err := s.apply(ctx, encodeMember(cmdSetMember, memberMeta{ID: id, APIAddr: api})); err != nil {
		return fmt.Errorf("record api address of %s: %w", id, err)
	}
	s.log.Info("member published its api address", "id", id, "api_addr", api)
	return nil
}

// watchLeadership records what a new leader owes the replicated state:
// the cluster id, if none is committed yet, and API addresses (its own, and
// those of the founding voters that the state does not have yet).
func (s *Store) watchLeadership() {
	defer s.wg.Done()
	for {
		select {
		case <-s.done:
			return
		case leader := <-s.notify:
			s.leadershipEvent()
			if leader {
				s.syncLeader()
			}
		}
	}
}

func (s *Store) syncLeader() {
	ctx, cancel := s.closingContext(10 * time.Second)
	defer cancel()
	s.identMu.Lock()
	ident := s.ident
	s.identMu.Unlock()
	if s.fsm.clusterID() == "" {
		// A random id, unless this data dir recorded one (a cluster founded
		// by an earlier version): the first one committed wins everywhere.
		id := ident.ClusterID
		if id == "" {
			id = newClusterID()
		}
		cmd := append([]byte{cmdSetClusterID}, id...)
		if err := s.apply(ctx, cmd); err != nil {
			s.log.Info("record cluster id", "err", err)
			return
		}
	}
	want := map[string]string{}
	if ident.Founding != nil {
		for _, p := range ident.Founding.Peers {
			want[p.ID] = p.APIAddr
		}
	}
	if s.cfg.APIAddr != "" {
		want[s.cfg.ID] = s.cfg.APIAddr
	}
	have := s.fsm.apiAddrs()
	for id, api := range want {
		// Others' addresses only fill a gap; the leader's own is its word.
		if api == "" || (have[id] != "" && id != s.cfg.ID) || have[id] == api {
			continue
		}
		if err := s.apply(ctx, encodeMember(cmdSetMember, memberMeta{ID: id, APIAddr: api})); err != nil {
			s.log.Info("record member api address", "id", id, "err", err)
			return
		}
	}
}

// watchClusterID records the committed cluster id in the data directory.
func (s *Store) watchClusterID() {
	defer s.wg.Done()
	for {
		select {
		case <-s.done:
			return
		case <-s.fsm.clusterIDSet:
		}
		id := s.fsm.clusterID()
		var old string
		changed := false
		err := s.updateIdentity(func(ident *identity) bool {
			old = ident.ClusterID
			if id == "" || old == id {
				return false
			}
			ident.ClusterID, changed = id, true
			return true
		})
		if err != nil {
			s.log.Error("record cluster id", "err", err)
			continue
		}
		if !changed {
			continue
		}
		if old != "" {
			s.log.Warn("the log's cluster id differs from the one the data dir recorded; keeping the log's", "recorded", old, "log", id)
		}
		s.log.Info("cluster id recorded", "cluster", id)
	}
}

// watchObservations counts leader changes and, on a node that joined,
// opens the vote gate once the node sees itself promoted.
func (s *Store) watchObservations() {
	defer s.wg.Done()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	var last raft.ServerID
	for {
		select {
		case <-s.done:
			return
		case o := <-s.obsCh:
			if _, ok := o.Data.(raft.LeaderObservation); ok {
				s.leadershipEvent()
			}
			if lo, ok := o.Data.(raft.LeaderObservation); ok && lo.LeaderID != "" && lo.LeaderID != last {
				last = lo.LeaderID
				s.leaderChanges.Add(1)
			}
		case <-tick.C:
			if s.gate != nil {
				s.gate.refresh()
			}
		}
	}
}

// LeaderChanges counts the leaders this node has seen take over.
func (s *Store) LeaderChanges() uint64 { return s.leaderChanges.Load() }
