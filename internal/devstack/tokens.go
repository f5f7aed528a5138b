package devstack

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"time"

	"github.com/fencegate/fencegate/raftstore"
	"github.com/fencegate/fencegate/tokenservice"
)

// Fixed addresses of the dev token cluster.
var (
	DevTokenAPIAddrs  = []string{"127.0.0.1:7101", "127.0.0.1:7102", "127.0.0.1:7103"}
	DevTokenRaftAddrs = []string{"127.0.0.1:7201", "127.0.0.1:7202", "127.0.0.1:7203"}
)

// Tokens is a token service cluster running in this process.
type Tokens struct {
	Servers []*tokenservice.Server
	// URLs are the nodes' API base URLs, for tokenservice.NewClient.
	URLs []string
}

// StartTokens starts len(apiAddrs) token service nodes, n1, n2, ..., in this
// process, with their data under dataDir/tokens/ID (resumed when present),
// and waits until the group has a leader that mints.
func StartTokens(ctx context.Context, dataDir string, apiAddrs, raftAddrs []string, log *slog.Logger) (_ *Tokens, err error) {
	if len(apiAddrs) != len(raftAddrs) || len(apiAddrs) == 0 {
		return nil, fmt.Errorf("devstack: %d API and %d Raft addresses; give one of each per node", len(apiAddrs), len(raftAddrs))
	}
	if log == nil {
		log = slog.Default().With("component", "devstack")
	}
	var peers []tokenservice.Peer
	for i := range apiAddrs {
		peers = append(peers, tokenservice.Peer{ID: fmt.Sprintf("n%d", i+1), RaftAddr: raftAddrs[i], APIAddr: "http://" + apiAddrs[i]})
	}
	t := &Tokens{}
	defer func() {
		if err != nil {
			t.Close()
		}
	}()
	// A founding node waits in Start until every peer answers: start them
	// all at once.
	servers := make([]*tokenservice.Server, len(peers))
	errs := make([]error, len(peers))
	var wg sync.WaitGroup
	for i, p := range peers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			servers[i], errs[i] = tokenservice.Start(ctx, tokenservice.Config{
				Config: raftstore.Config{
					ID:       p.ID,
					DataDir:  filepath.Join(dataDir, "tokens", p.ID),
					RaftAddr: p.RaftAddr,
					APIAddr:  p.APIAddr,
					Peers:    peers,
					Logger:   log.With("node", p.ID),
				},
			})
			if errs[i] != nil {
				errs[i] = fmt.Errorf("start token node %s: %w", p.ID, errs[i])
			}
		}()
	}
	wg.Wait()
	for _, s := range servers {
		if s != nil {
			t.Servers = append(t.Servers, s)
			t.URLs = append(t.URLs, s.APIURL())
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	c, err := tokenservice.NewClient(t.URLs, tokenservice.WithMaxWait(30*time.Second))
	if err != nil {
		return nil, err
	}
	defer c.Close()
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		st, err := c.Status(wctx)
		if err == nil && st.LeaderID != "" {
			return t, nil
		}
		select {
		case <-wctx.Done():
			return nil, fmt.Errorf("devstack: token cluster elected no leader: %w", errors.Join(err, wctx.Err()))
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Close stops every node cleanly, all at once so that none spends the
// shutdown electing itself.
func (t *Tokens) Close() error {
	errs := make([]error, len(t.Servers))
	var wg sync.WaitGroup
	for i, s := range t.Servers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = s.Close()
		}()
	}
	wg.Wait()
	t.Servers = nil
	return errors.Join(errs...)
}
