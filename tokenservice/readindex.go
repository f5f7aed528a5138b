package tokenservice

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"sync"
	"time"

	"github.com/fencegate/fencegate/raftstore"
	"github.com/fencegate/fencegate/tokenapi"
	"github.com/fencegate/fencegate/tokenclient"
)

// viewConfirmer asks another voter for its raftstore.View over the
// node-to-node API (a view stream, viewstream.go, or GET /v1/internal/view
// from a node without them), with this node's peer certificate; with TLS the answer counts only from a peer certificate
// whose CN is that voter's ID.
type viewConfirmer struct {
	s *Server
	// urls caches each API address's view URL (NormalizeURL parses it,
	// at about the cost of the rest of a question).
	mu   sync.Mutex
	urls map[string]string
	// streams are the kept view streams (viewstream.go).
	streams viewStreams
}

// viewURL returns the URL of GET /v1/internal/view at api.
func (c *viewConfirmer) viewURL(api string) (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if u, ok := c.urls[api]; ok {
		return u, nil
	}
	u, err := tokenclient.NormalizeURL(api)
	if err != nil {
		return "", err
	}
	if c.s.probe.scheme != "" {
		u = withScheme(u, c.s.probe.scheme)
	}
	u += "/v1/internal/view"
	if c.urls == nil || len(c.urls) >= 64 {
		c.urls = map[string]string{} // addresses change rarely; forget the old
	}
	c.urls[api] = u
	return u, nil
}

func (c *viewConfirmer) View(ctx context.Context, v tokenapi.Peer) (raftstore.View, error) {
	if v.APIAddr == "" {
		return raftstore.View{}, fmt.Errorf("%w: the API address of voter %s is not known yet", tokenapi.ErrUnavailable, v.ID)
	}
	u, err := c.viewURL(v.APIAddr)
	if err != nil {
		return raftstore.View{}, err
	}
	if su := u + "-stream"; !c.streams.streamless(su) {
		view, err := c.streamView(ctx, v, su)
		if !errors.Is(err, errNoStream) {
			return view, err
		}
	}
	var view raftstore.View
	cn, err := c.s.probe.getURL(ctx, u, &view)
	if err != nil {
		return raftstore.View{}, err
	}
	if c.s.probe.verify && cn != v.ID {
		return raftstore.View{}, fmt.Errorf("%w: the node at %s answered as %q, not as voter %s; refused", tokenapi.ErrUnavailable, v.APIAddr, cn, v.ID)
	}
	return view, nil
}

// ri returns the node's read-index path: nil until Raft runs, and with
// Config.CommitPerBatch. (The store is published after the path is set.)
func (s *Server) ri() *raftstore.ReadIndex {
	if s.Store() == nil {
		return nil
	}
	return s.readIndex
}

// handleView answers a leader's confirmation round: this node's current
// term and the leader it follows, read now.
func (s *Server) handleView(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, s.Store().View())
}

// roundRate is the confirmation rounds per second over the last second.
type roundRate struct {
	mu   sync.Mutex
	rate float64
}

func (r *roundRate) get() float64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.rate
}

// roundRateLoop samples the round counter once a second.
func (s *Server) roundRateLoop() {
	defer s.bg.Done()
	t := time.NewTicker(time.Second)
	defer t.Stop()
	last, lastAt := s.readIndex.Stats().Rounds, time.Now()
	for {
		select {
		case <-s.bgCtx.Done():
			return
		case now := <-t.C:
			n := s.readIndex.Stats().Rounds
			rate := float64(n-last) / now.Sub(lastAt).Seconds()
			s.rounds.mu.Lock()
			s.rounds.rate = math.Round(rate*10) / 10
			s.rounds.mu.Unlock()
			last, lastAt = n, now
		}
	}
}
