package tokenservice

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/fencegate/fencegate/raftstore"
)

// httpProber asks other nodes about themselves over their API: what an
// empty node asks its peers before it starts Raft, and what the leader
// asks a new member to learn whether it caught up.
type httpProber struct {
	hc *http.Client
	// scheme is every node's scheme: https with TLS, whatever an address
	// was written or recorded with.
	scheme string
}

var _ raftstore.Prober = (*httpProber)(nil)

// State asks the node at api for its raftstore.NodeState.
func (p *httpProber) State(ctx context.Context, api string) (raftstore.NodeState, error) {
	var st raftstore.NodeState
	err := p.get(ctx, api, "/v1/internal/state", &st)
	return st, err
}

// Configuration asks the node at api for the committed configuration; a
// follower names the leader, which is asked in turn.
func (p *httpProber) Configuration(ctx context.Context, api string) (raftstore.Configuration, error) {
	var conf raftstore.Configuration
	err := p.get(ctx, api, "/v1/internal/configuration", &conf)
	var ae *APIError
	if errors.As(err, &ae) && ae.Code == CodeNotLeader && ae.LeaderAPI != "" && ae.LeaderAPI != api {
		err = p.get(ctx, ae.LeaderAPI, "/v1/internal/configuration", &conf)
	}
	return conf, err
}

func (p *httpProber) get(ctx context.Context, api, path string, out any) error {
	u, err := NormalizeURL(api)
	if err != nil {
		return err
	}
	if p.scheme != "" {
		u = withScheme(u, p.scheme)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u+path, nil)
	if err != nil {
		return err
	}
	resp, err := p.hc.Do(req)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		return fmt.Errorf("%w: read answer of %s: %w", ErrUnavailable, u, err)
	}
	if resp.StatusCode != http.StatusOK {
		return decodeError(resp.StatusCode, body)
	}
	if err := json.Unmarshal(body, out); err != nil {
		return fmt.Errorf("%w: %s answered %.100q: %v", ErrInternal, u+path, body, err)
	}
	return nil
}

// handleState tells a peer what this node holds: before Raft starts, what
// the founding and join rules need; while it runs, also its Raft indexes.
func (s *Server) handleState(w http.ResponseWriter, r *http.Request) {
	if st := s.Store(); st != nil {
		writeJSON(w, http.StatusOK, st.State())
		return
	}
	if p := s.pending.Load(); p != nil {
		writeJSON(w, http.StatusOK, p.State())
		return
	}
	s.writeError(w, fmt.Errorf("%w: node %s is starting", ErrUnavailable, s.cfg.ID))
}

// handleConfiguration answers a joining node with the committed
// configuration. Only the leader answers; others name it.
func (s *Server) handleConfiguration(w http.ResponseWriter, r *http.Request) {
	conf, err := s.Store().Configuration(r.Context())
	if err != nil {
		s.writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, conf)
}
