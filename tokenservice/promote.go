package tokenservice

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/fencegate/fencegate/tokenapi"
)

// kickPromote makes the promotion loop look at once.
func (s *Server) kickPromote() {
	select {
	case s.promoteKick <- struct{}{}:
	default:
	}
}

// promoteLoop runs on every node and acts while it leads: a non-voter whose
// applied index has reached the commit index the leader had at the
// previous check, one interval earlier, is promoted to voter. (The commit
// index of the very moment would never do under a steady load: a member
// learns of a commit only with the leader's next append.) The loop, not
// the command that added the member, promotes: the promotion then survives
// the command being interrupted and a change of leader (the new leader's
// loop carries on).
func (s *Server) promoteLoop() {
	defer s.bg.Done()
	t := time.NewTicker(s.cfg.PromoteInterval)
	defer t.Stop()
	var floor, term uint64
	for {
		select {
		case <-s.bgCtx.Done():
			return
		case <-t.C:
		case <-s.promoteKick:
		}
		st := s.Store()
		status := st.Status()
		if status.State != "Leader" {
			floor, term = 0, 0
			continue
		}
		if status.Term != term {
			floor, term = 0, status.Term // a new term: sample first
		}
		if floor > 0 {
			s.promoteCaughtUp(s.bgCtx, floor)
		}
		floor = status.CommitIndex
	}
}

// promoteCaughtUp promotes the non-voters that have applied floor.
func (s *Server) promoteCaughtUp(ctx context.Context, floor uint64) {
	st := s.Store()
	for _, m := range st.Status().Members {
		if m.Suffrage != "Nonvoter" || m.APIAddr == "" {
			continue
		}
		ns, err := s.askMember(ctx, m)
		if err != nil {
			s.log.Debug("non-voter not ready for promotion", "id", m.ID, "why", err)
			continue
		}
		if ns.AppliedIndex < floor {
			s.log.Debug("non-voter catching up", "id", m.ID, "applied", ns.AppliedIndex, "leader_commit", floor)
			continue
		}
		pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err = st.Promote(pctx, m.ID)
		cancel()
		if err != nil {
			s.log.Info("promote caught-up non-voter", "id", m.ID, "err", err)
			continue
		}
		s.metrics.promotions.Inc()
		s.log.Info("promoted caught-up member to voter", "id", m.ID, "applied", ns.AppliedIndex, "leader_commit", floor)
	}
}

// publishLoop makes the replicated state hold this node's own API address:
// when the node starts, and whenever the state holds another (the node was
// restarted with a new --api-addr). A leader records it directly; a
// follower asks the leader, which is the only path by which a member's
// address changes.
func (s *Server) publishLoop() {
	defer s.bg.Done()
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		if err := s.publishAPIAddr(s.bgCtx); err != nil {
			s.log.Debug("publish own api address", "err", err)
		}
		select {
		case <-s.bgCtx.Done():
			return
		case <-t.C:
		}
	}
}

func (s *Server) publishAPIAddr(ctx context.Context) error {
	st := s.Store()
	if st.APIAddrOf(s.cfg.ID) == s.apiURL || !st.IsMember(s.cfg.ID) {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.ForwardTimeout)
	defer cancel()
	if st.IsLeader() {
		return st.SetAPIAddr(ctx, s.cfg.ID, s.apiURL)
	}
	leaderID, leader, err := s.leaderAPI()
	if err != nil {
		return err
	}
	body, _ := json.Marshal(tokenapi.APIAddrRequest{APIAddr: s.apiURL})
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, leader+"/v1/members/"+url.PathEscape(s.cfg.ID)+"/api-addr", bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := s.fwd.Do(req)
	if err != nil {
		return fmt.Errorf("%w: publish api address to %s: %w", tokenapi.ErrUnavailable, leader, err)
	}
	defer resp.Body.Close()
	if err := s.checkLeaderIdentity(resp, leaderID, leader); err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		var buf bytes.Buffer
		_, _ = buf.ReadFrom(resp.Body)
		return tokenapi.DecodeError(resp.StatusCode, buf.Bytes())
	}
	s.log.Info("published own api address", "api", s.apiURL)
	return nil
}
