package tokenservice

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/fencegate/fencegate/raftstore"
	"github.com/fencegate/fencegate/tokenapi"
	"github.com/fencegate/fencegate/tokenclient"
)

// memberProbeTimeout bounds the leader's question to one member.
const memberProbeTimeout = 1500 * time.Millisecond

// handleMembers lists the committed members and, for each, whether it has
// caught up with the leader. Only the leader answers.
func (s *Server) handleMembers(w http.ResponseWriter, r *http.Request) {
	ms, err := s.members(r.Context())
	if err != nil {
		s.writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, ms)
}

// members reads the committed configuration and asks every member how far
// it has applied the log.
func (s *Server) members(ctx context.Context) (tokenapi.Members, error) {
	st := s.Store()
	// The commit index before the barrier: by the time the barrier has
	// committed, every member that keeps up has learned of it.
	commit := st.Status().CommitIndex
	conf, err := st.Configuration(ctx)
	if err != nil {
		return tokenapi.Members{}, err
	}
	out := tokenapi.Members{ClusterID: conf.ClusterID, LeaderID: conf.LeaderID, CommitIndex: commit, Members: make([]tokenapi.Member, len(conf.Members))}
	var wg sync.WaitGroup
	for i, m := range conf.Members {
		out.Members[i] = m
		wg.Add(1)
		go func() {
			defer wg.Done()
			om := &out.Members[i]
			if m.ID == s.cfg.ID {
				yes := true
				om.CaughtUp, om.AppliedIndex = &yes, st.Status().AppliedIndex
				return
			}
			ns, err := s.askMember(ctx, m)
			if err != nil {
				om.Problem = err.Error()
				return
			}
			caught := ns.AppliedIndex >= commit
			om.CaughtUp, om.AppliedIndex = &caught, ns.AppliedIndex
		}()
	}
	wg.Wait()
	return out, nil
}

// askMember asks a running member for its state and checks that the node
// answering is that member, of this cluster.
func (s *Server) askMember(ctx context.Context, m tokenapi.Member) (raftstore.NodeState, error) {
	if m.APIAddr == "" {
		return raftstore.NodeState{}, fmt.Errorf("its api address is not known yet")
	}
	ctx, cancel := context.WithTimeout(ctx, memberProbeTimeout)
	defer cancel()
	ns, err := s.probe.State(ctx, m.APIAddr)
	switch {
	case err != nil:
		return ns, fmt.Errorf("does not answer at %s: %v", m.APIAddr, err)
	case ns.NodeID != m.ID:
		return ns, fmt.Errorf("the node at %s says it is %q", m.APIAddr, ns.NodeID)
	case ns.Phase != raftstore.PhaseRunning:
		return ns, fmt.Errorf("has not started Raft (%s)", ns.Phase)
	}
	if cid := s.Store().Status().ClusterID; cid != "" && ns.ClusterID != "" && ns.ClusterID != cid {
		return ns, fmt.Errorf("holds cluster %s, not %s", ns.ClusterID, cid)
	}
	return ns, nil
}

// handleAddMember adds a member as a non-voter, after checking that the
// node answers at the addresses given; the promotion loop makes it a voter
// once it has caught up. Only the leader answers.
func (s *Server) handleAddMember(w http.ResponseWriter, r *http.Request) {
	var req tokenapi.Peer
	if err := decodeBody(r, &req); err != nil {
		s.writeError(w, err)
		return
	}
	var err error
	switch {
	case req.ID == "" || req.RaftAddr == "" || req.APIAddr == "":
		err = fmt.Errorf("%w: a new member needs \"id\", \"raft_addr\" and \"api_addr\"", tokenapi.ErrBadRequest)
	default:
		if _, _, e := net.SplitHostPort(req.RaftAddr); e != nil {
			err = fmt.Errorf("%w: raft_addr %q is not HOST:PORT", tokenapi.ErrBadRequest, req.RaftAddr)
		} else if req.APIAddr, e = tokenclient.NormalizeURL(req.APIAddr); e != nil {
			err = fmt.Errorf("%w: api_addr: %v", tokenapi.ErrBadRequest, e)
		} else {
			req.APIAddr = withScheme(req.APIAddr, s.scheme())
		}
	}
	if err != nil {
		s.writeError(w, err)
		return
	}
	st := s.Store()
	if !st.IsLeader() {
		s.writeError(w, fmt.Errorf("%w: add member %s", raftstore.ErrNotLeader, req.ID))
		return
	}
	if err := s.checkNewMember(r.Context(), req); err != nil {
		s.writeError(w, err)
		return
	}
	if err := st.AddNonvoter(r.Context(), req); err != nil {
		s.writeError(w, err)
		return
	}
	s.kickPromote()
	writeJSON(w, http.StatusOK, tokenapi.Member{ID: req.ID, RaftAddr: req.RaftAddr, APIAddr: req.APIAddr, Suffrage: "Nonvoter"})
}

// checkNewMember refuses, before the configuration changes, a new member
// that does not answer at its API address as itself, that holds another
// cluster's state, or whose Raft address does not accept connections. With
// TLS both answers must come from the new member itself: its API from a
// peer certificate naming its id (the prober checks it), its Raft address
// from a peer certificate that names that address and its id (dialled
// through the Raft layer, as Raft will).
func (s *Server) checkNewMember(ctx context.Context, req tokenapi.Peer) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	ns, err := s.probe.State(ctx, req.APIAddr)
	if err != nil {
		return fmt.Errorf("%w: no node answers at api address %s (%v); start the new node first (with an empty data directory, told to join this cluster), then add it", tokenapi.ErrRefused, req.APIAddr, err)
	}
	if ns.NodeID != req.ID {
		return fmt.Errorf("%w: the node at %s says it is %q, not %q; check the id and the address", tokenapi.ErrRefused, req.APIAddr, ns.NodeID, req.ID)
	}
	if cid := s.Store().Status().ClusterID; ns.HasState && ns.ClusterID != "" && cid != "" && ns.ClusterID != cid {
		return fmt.Errorf("%w: %s at %s holds the state of cluster %s, not of this cluster %s; give it an empty data directory", tokenapi.ErrRefused, req.ID, req.APIAddr, ns.ClusterID, cid)
	}
	c, err := s.raftLayer.Dial(ctx, req.RaftAddr)
	if err != nil {
		if s.auth != nil {
			return fmt.Errorf("%w: no node of this cluster accepts connections at raft address %s (%v); check the address and that the new node's certificate names its host", tokenapi.ErrRefused, req.RaftAddr, err)
		}
		return fmt.Errorf("%w: nothing accepts connections at raft address %s (%v); check the address", tokenapi.ErrRefused, req.RaftAddr, err)
	}
	defer c.Close()
	if tc, ok := c.(*tls.Conn); ok {
		if cn := tc.ConnectionState().PeerCertificates[0].Subject.CommonName; cn != req.ID {
			return fmt.Errorf("%w: the node at raft address %s is %q (its certificate), not %q; check the id and the address", tokenapi.ErrRefused, req.RaftAddr, cn, req.ID)
		}
	}
	return nil
}

// handleRemoveMember removes a member, unless removing a voter would leave
// fewer live voters than a quorum of the rest needs. Only the leader
// answers.
func (s *Server) handleRemoveMember(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	st := s.Store()
	if !st.IsLeader() {
		s.writeError(w, fmt.Errorf("%w: remove member %s", raftstore.ErrNotLeader, id))
		return
	}
	if err := st.Remove(r.Context(), id, s.liveVoters(r.Context())); err != nil {
		s.writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"id": id, "removed": true})
}

// liveVoters asks every other voter whether it runs and follows this
// leader in its term.
func (s *Server) liveVoters(ctx context.Context) map[string]bool {
	st := s.Store()
	status := st.Status()
	live := map[string]bool{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, m := range status.Members {
		if m.ID == s.cfg.ID || m.Suffrage != "Voter" {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			ns, err := s.askMember(ctx, m)
			if err == nil && ns.LeaderID == s.cfg.ID && ns.Term == status.Term {
				mu.Lock()
				live[m.ID] = true
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return live
}

// handleSetAPIAddr records the API address a member publishes for itself.
// Only the leader answers.
func (s *Server) handleSetAPIAddr(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	var req tokenapi.APIAddrRequest
	if err := decodeBody(r, &req); err != nil {
		s.writeError(w, err)
		return
	}
	api, err := tokenclient.NormalizeURL(req.APIAddr)
	if err != nil {
		s.writeError(w, fmt.Errorf("%w: api_addr: %v", tokenapi.ErrBadRequest, err))
		return
	}
	api = withScheme(api, s.scheme())
	if err := s.Store().SetAPIAddr(r.Context(), id, api); err != nil {
		s.writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"id": id, "api_addr": api})
}
