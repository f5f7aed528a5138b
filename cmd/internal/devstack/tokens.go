package devstack

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"time"

	"github.com/fencegate/fencegate/internal/freeport"
	"github.com/fencegate/fencegate/internal/poll"
	"github.com/fencegate/fencegate/raftstore"
	"github.com/fencegate/fencegate/tokenapi"
	"github.com/fencegate/fencegate/tokenclient"
	"github.com/fencegate/fencegate/tokenservice"
	"github.com/fencegate/fencegate/tokensign"
)

// TokenOptions configures StartTokens.
type TokenOptions struct {
	// DataDir holds each node's Raft data in DataDir/ID, resumed when
	// present. Required.
	DataDir string
	// API and Raft are the nodes' addresses, one of each per node. When
	// both are empty, Nodes nodes run on free loopback ports.
	API, Raft []string
	// Nodes is the number of nodes on free ports. The default is 3.
	Nodes int
	// SigningKeys, when set, has every node sign the tokens it hands out.
	SigningKeys *tokensign.Keyring
	// Logger gets the nodes' logs, each with its node id. The default is
	// slog.Default().
	Logger *slog.Logger
}

// Tokens is a token service cluster running in this process.
type Tokens struct {
	Servers []*tokenservice.Server
	// URLs are the nodes' API base URLs, for tokenclient.NewClient.
	URLs []string
	// ClusterID is the id the cluster founded itself with.
	ClusterID string
}

// StartTokens starts a token service cluster in this process, nodes n1, n2,
// ..., and waits until it has a leader that mints and a cluster id. On
// error, the nodes started are stopped again.
func StartTokens(ctx context.Context, o TokenOptions) (_ *Tokens, err error) {
	if len(o.API) == 0 && len(o.Raft) == 0 {
		if o.Nodes <= 0 {
			o.Nodes = 3
		}
		addrs, err := freeport.Loopback(2 * o.Nodes)
		if err != nil {
			return nil, err
		}
		o.API, o.Raft = addrs[:o.Nodes], addrs[o.Nodes:]
	}
	if len(o.API) != len(o.Raft) {
		return nil, fmt.Errorf("devstack: %d API and %d Raft addresses; give one of each per node", len(o.API), len(o.Raft))
	}
	if o.Logger == nil {
		o.Logger = slog.Default().With("component", "devstack")
	}
	var peers []tokenapi.Peer
	for i := range o.API {
		peers = append(peers, tokenapi.Peer{ID: fmt.Sprintf("n%d", i+1), RaftAddr: o.Raft[i], APIAddr: "http://" + o.API[i]})
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
		wg.Go(func() {
			servers[i], errs[i] = tokenservice.Start(ctx, tokenservice.Config{
				Config: raftstore.Config{
					ID:       p.ID,
					DataDir:  filepath.Join(o.DataDir, p.ID),
					RaftAddr: p.RaftAddr,
					APIAddr:  p.APIAddr,
					Peers:    peers,
					Logger:   o.Logger.With("node", p.ID),
				},
				SigningKeys: o.SigningKeys,
			})
			if errs[i] != nil {
				errs[i] = fmt.Errorf("start token node %s: %w", p.ID, errs[i])
			}
		})
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
	c, err := tokenclient.NewClient(t.URLs, tokenclient.WithMaxWait(30*time.Second))
	if err != nil {
		return nil, err
	}
	defer c.Close()
	err = poll.Until(ctx, "the token cluster to elect a leader", 50*time.Millisecond, 30*time.Second, func(ctx context.Context) error {
		st, err := c.Status(ctx)
		switch {
		case err != nil:
			return err
		case st.LeaderID == "" || st.ClusterID == "":
			return errors.New("no leader yet")
		}
		t.ClusterID = st.ClusterID
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("devstack: %w", err)
	}
	return t, nil
}

// Close stops every node cleanly, all at once so that none spends the
// shutdown electing itself.
func (t *Tokens) Close() error {
	errs := make([]error, len(t.Servers))
	var wg sync.WaitGroup
	for i, s := range t.Servers {
		wg.Go(func() { errs[i] = s.Close() })
	}
	wg.Wait()
	t.Servers = nil
	return errors.Join(errs...)
}
