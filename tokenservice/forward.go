package tokenservice

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/fencegate/fencegate/raftstore"
	"github.com/fencegate/fencegate/tokenapi"
)

// leaderAPI returns the ID and API URL of the leader this node's Raft
// reports (LeaderWithID), or an error that says why it cannot forward.
// With TLS the URL is https whatever was recorded: every node serves TLS.
func (s *Server) leaderAPI() (id, api string, err error) {
	id, api = s.leader()
	switch {
	case id == "":
		return "", "", fmt.Errorf("%w: node %s knows no leader", tokenapi.ErrNoQuorum, s.cfg.ID)
	case id == s.cfg.ID:
		return "", "", fmt.Errorf("%w: node %s is between terms", tokenapi.ErrNoQuorum, s.cfg.ID)
	case api == "":
		return "", "", fmt.Errorf("%w: the API address of leader %s is not known yet", tokenapi.ErrUnavailable, id)
	}
	return id, api, nil
}

// leader returns the ID and API URL of the leader Raft names; with TLS the
// URL is https whatever scheme was recorded (a cluster that ran without TLS
// before recorded http), since every node of a TLS cluster serves https.
func (s *Server) leader() (id, api string) {
	st := s.Store()
	if st == nil {
		return "", "" // Raft has not started
	}
	id, api = st.Leader()
	if s.auth != nil {
		if rest, ok := strings.CutPrefix(api, "http://"); ok {
			api = "https://" + rest
		}
	}
	return id, api
}

// forwardAlloc asks the leader to allocate n tokens in one entry.
func (s *Server) forwardAlloc(ctx context.Context, n, hops int) (raftstore.Range, error) {
	body, _ := json.Marshal(tokenapi.AllocRequest{Count: n})
	s.metrics.forwarded(n)
	status, out, err := s.forwardRaw(ctx, http.MethodPost, "/v1/internal/allocate", body, hops)
	if err != nil {
		return raftstore.Range{}, err
	}
	if status != http.StatusOK {
		return raftstore.Range{}, tokenapi.DecodeError(status, out)
	}
	var resp tokenapi.AllocResponse
	if err := json.Unmarshal(out, &resp); err != nil || resp.Count != n || resp.First <= 0 {
		return raftstore.Range{}, fmt.Errorf("%w: leader answered an allocation of %d tokens with %q", tokenapi.ErrInternal, n, out)
	}
	return raftstore.Range{First: resp.First, Count: resp.Count, Term: resp.Term, Index: resp.Index, Leader: resp.Leader}, nil
}

// forwardRaw sends a request to the leader and returns its status and body.
func (s *Server) forwardRaw(ctx context.Context, method, path string, body []byte, hops int) (int, []byte, error) {
	leader, api, err := s.leaderAPI()
	if err != nil {
		return 0, nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.ForwardTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, api+path, bytes.NewReader(body))
	if err != nil {
		return 0, nil, fmt.Errorf("%w: build forward request: %v", tokenapi.ErrInternal, err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(hopsHeader, strconv.Itoa(hops))
	resp, err := s.fwd.Do(req)
	if err != nil {
		return 0, nil, fmt.Errorf("%w: forward to leader at %s: %w", tokenapi.ErrUnavailable, api, err)
	}
	defer resp.Body.Close()
	if err := s.checkLeaderIdentity(resp, leader, api); err != nil {
		return 0, nil, err
	}
	out, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		return 0, nil, fmt.Errorf("%w: read leader's answer from %s: %w", tokenapi.ErrUnavailable, api, err)
	}
	return resp.StatusCode, out, nil
}

// checkLeaderIdentity refuses an answer that does not come from leader:
// with TLS the node that answered must present a peer certificate of the
// cluster CA for exactly the node Raft reports as leader. An address
// recorded for the leader by mistake or by an attacker, or a host that took
// over the leader's address, cannot put its numbers into this node's
// answers.
func (s *Server) checkLeaderIdentity(resp *http.Response, leader, api string) error {
	if s.auth == nil {
		return nil // plain HTTP: loopback only, nothing to check against
	}
	if resp.TLS == nil || len(resp.TLS.PeerCertificates) == 0 {
		s.log.Warn("refused an answer from the leader's address: not TLS", "leader", leader, "api", api)
		return fmt.Errorf("%w: the answer from %s for leader %s came without TLS; refused", tokenapi.ErrUnavailable, api, leader)
	}
	cert := resp.TLS.PeerCertificates[0]
	if got := cert.Subject.CommonName; got != leader || !slices.Contains(tokenapi.RolesOf(cert), tokenapi.RolePeer) {
		s.log.Warn("refused an answer from the leader's address: another identity", "leader", leader, "api", api,
			"answered_as", got, "roles", tokenapi.RolesOf(cert))
		return fmt.Errorf("%w: the node at %s answered as %q (roles %v), not as leader %s; its answer is refused", tokenapi.ErrUnavailable, api, got, tokenapi.RolesOf(cert), leader)
	}
	return nil
}
