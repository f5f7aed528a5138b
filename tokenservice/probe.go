package tokenservice

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/fencegate/fencegate/raftstore"
	"github.com/fencegate/fencegate/tokenapi"
	"github.com/fencegate/fencegate/tokenclient"
)

// httpProber asks other nodes about themselves over their API: what an
// empty node asks its peers before it starts Raft, and what the leader
// asks a new member to learn whether it caught up.
//
// With TLS (verify) an answer counts only from the node it speaks for: the
// answering node must present a peer certificate of the cluster CA (the
// client's TLS configuration requires it) whose CN is the node ID the
// state names, or the leader ID the configuration names. So a host that
// took over a peer's address, or a peer answering for another, cannot make
// an empty node found a second cluster or join the wrong one.
type httpProber struct {
	hc *http.Client
	// scheme is every node's scheme: https with TLS, whatever an address
	// was written or recorded with.
	scheme string
	verify bool
}

var _ raftstore.Prober = (*httpProber)(nil)

// State asks the node at api for its raftstore.NodeState.
func (p *httpProber) State(ctx context.Context, api string) (raftstore.NodeState, error) {
	var st raftstore.NodeState
	cn, err := p.get(ctx, api, "/v1/internal/state", &st)
	if err == nil && p.verify && cn != st.NodeID {
		return raftstore.NodeState{}, fmt.Errorf("%w: the node at %s says it is %q but its certificate names %q; its answer is refused",
			tokenapi.ErrUnavailable, api, st.NodeID, cn)
	}
	return st, err
}

// Configuration asks the node at api for the committed configuration; a
// follower names the leader, which is asked in turn.
func (p *httpProber) Configuration(ctx context.Context, api string) (raftstore.Configuration, error) {
	var conf raftstore.Configuration
	cn, err := p.get(ctx, api, "/v1/internal/configuration", &conf)
	var ae *tokenapi.APIError
	if errors.As(err, &ae) && ae.Code == tokenapi.CodeNotLeader && ae.LeaderAPI != "" && ae.LeaderAPI != api {
		api = ae.LeaderAPI
		cn, err = p.get(ctx, api, "/v1/internal/configuration", &conf)
	}
	if err == nil && p.verify && cn != conf.LeaderID {
		return raftstore.Configuration{}, fmt.Errorf("%w: the configuration from %s names leader %q but came from %q; refused",
			tokenapi.ErrUnavailable, api, conf.LeaderID, cn)
	}
	return conf, err
}

// get asks the node at api and decodes its answer into out; it returns the
// CN of the certificate the node presented ("" without TLS).
func (p *httpProber) get(ctx context.Context, api, path string, out any) (string, error) {
	u, err := tokenclient.NormalizeURL(api)
	if err != nil {
		return "", err
	}
	if p.scheme != "" {
		u = withScheme(u, p.scheme)
	}
	return p.getURL(ctx, u+path, out)
}

// getURL is get of a URL already normalized and given the cluster's
// scheme.
func (p *httpProber) getURL(ctx context.Context, u string, out any) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return "", err
	}
	resp, err := p.hc.Do(req)
	if err != nil {
		return "", fmt.Errorf("%w: %w", tokenapi.ErrUnavailable, err)
	}
	defer resp.Body.Close()
	var cn string
	if resp.TLS != nil && len(resp.TLS.PeerCertificates) > 0 {
		cn = resp.TLS.PeerCertificates[0].Subject.CommonName
	} else if p.verify {
		return "", fmt.Errorf("%w: %s answered without TLS; refused", tokenapi.ErrUnavailable, u)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		return "", fmt.Errorf("%w: read answer of %s: %w", tokenapi.ErrUnavailable, u, err)
	}
	if resp.StatusCode != http.StatusOK {
		return "", tokenapi.DecodeError(resp.StatusCode, body)
	}
	if err := json.Unmarshal(body, out); err != nil {
		return "", fmt.Errorf("%w: %s answered %.100q: %v", tokenapi.ErrInternal, u, body, err)
	}
	return cn, nil
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
	s.writeError(w, fmt.Errorf("%w: node %s is starting", tokenapi.ErrUnavailable, s.cfg.ID))
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
