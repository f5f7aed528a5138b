package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/fencegate/fencegate/lockclient"
	"github.com/fencegate/fencegate/raftstore"
	"github.com/fencegate/fencegate/tokenservice"
)

// tokenSource returns the token service client the full-cycle scenarios
// use: for the servers given with -token-servers, or else for 3 nodes
// started in this process on free ports with temporary data directories.
// The returned function stops what was started.
func tokenSource(ctx context.Context, cfg config, stderr io.Writer) (lockclient.TokenSource, func(), error) {
	if len(cfg.tokenURLs) > 0 {
		c, err := tokenservice.NewClient(cfg.tokenURLs)
		if err != nil {
			return nil, nil, err
		}
		return c, func() { c.Close() }, nil
	}
	fmt.Fprintln(stderr, "starting a 3-node token cluster in-process")
	dir, err := os.MkdirTemp("", "fencegate-bench-locks-")
	if err != nil {
		return nil, nil, err
	}
	var servers []*tokenservice.Server
	stop := func() {
		for _, s := range servers {
			s.Close()
		}
		os.RemoveAll(dir)
	}
	var peers []tokenservice.Peer
	for i := range 3 {
		raft, err1 := freePort()
		api, err2 := freePort()
		if err := errors.Join(err1, err2); err != nil {
			stop()
			return nil, nil, err
		}
		peers = append(peers, tokenservice.Peer{ID: fmt.Sprintf("n%d", i+1),
			RaftAddr: fmt.Sprintf("127.0.0.1:%d", raft), APIAddr: fmt.Sprintf("http://127.0.0.1:%d", api)})
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	var urls []string
	// A founding node waits in Start until every peer answers: start them
	// all at once.
	started := make([]*tokenservice.Server, len(peers))
	errs := make([]error, len(peers))
	var wg sync.WaitGroup
	for i, p := range peers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			started[i], errs[i] = tokenservice.Start(ctx, tokenservice.Config{
				Config: raftstore.Config{
					ID:       p.ID,
					DataDir:  filepath.Join(dir, p.ID),
					RaftAddr: p.RaftAddr,
					APIAddr:  p.APIAddr,
					Peers:    peers,
					Logger:   quiet,
				},
			})
		}()
	}
	wg.Wait()
	for i, s := range started {
		if s != nil {
			servers = append(servers, s)
		}
		urls = append(urls, peers[i].APIAddr)
	}
	if err := errors.Join(errs...); err != nil {
		stop()
		return nil, nil, fmt.Errorf("start token nodes: %w", err)
	}
	c, err := tokenservice.NewClient(urls)
	if err != nil {
		stop()
		return nil, nil, err
	}
	// Wait for a leader: the first token is minted once one is elected.
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := c.NextToken(wctx, "bench:warmup"); err != nil {
		c.Close()
		stop()
		return nil, nil, fmt.Errorf("token cluster did not come up: %w", err)
	}
	return c, func() { c.Close(); stop() }, nil
}
