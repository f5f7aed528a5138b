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

	"github.com/fencegate/fencegate/internal/freeport"
	"github.com/fencegate/fencegate/lockclient"
	"github.com/fencegate/fencegate/raftstore"
	"github.com/fencegate/fencegate/tokenapi"
	"github.com/fencegate/fencegate/tokenclient"
	"github.com/fencegate/fencegate/tokenservice"
)

// tokenSource returns the token service client the full-cycle scenarios
// use: for the servers given with -token-servers, or else for 3 nodes
// started in this process on free ports with temporary data directories.
// The returned function stops what was started.
func tokenSource(ctx context.Context, cfg config, stderr io.Writer) (lockclient.TokenSource, func(), error) {
	if len(cfg.tokenURLs) > 0 {
		c, err := tokenclient.NewClient(cfg.tokenURLs)
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
	nodes, err := startNodes(ctx, dir)
	if err != nil {
		os.RemoveAll(dir)
		return nil, nil, err
	}
	stop := func() {
		var wg sync.WaitGroup
		for _, n := range nodes {
			wg.Go(func() { n.Close() })
		}
		wg.Wait()
		os.RemoveAll(dir)
	}
	urls := make([]string, len(nodes))
	for i, n := range nodes {
		urls[i] = n.APIURL()
	}
	c, err := tokenclient.NewClient(urls, tokenclient.WithMaxWait(30*time.Second))
	if err != nil {
		stop()
		return nil, nil, err
	}
	// The first token, before any measurement.
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := c.NextToken(wctx, "bench:warmup"); err != nil {
		c.Close()
		stop()
		return nil, nil, fmt.Errorf("token cluster did not come up: %w", err)
	}
	return c, func() { c.Close(); stop() }, nil
}

// startNodes starts nodes n1, n2 and n3 of a token service cluster in this
// process on free loopback ports, with their data under dir. A founding
// node waits in tokenservice.Start until every peer answers: they start
// all at once. The first token the caller asks for waits for a leader.
func startNodes(ctx context.Context, dir string) ([]*tokenservice.Server, error) {
	addrs, err := freeport.Loopback(6)
	if err != nil {
		return nil, err
	}
	var peers []tokenapi.Peer
	for i := range 3 {
		peers = append(peers, tokenapi.Peer{ID: fmt.Sprintf("n%d", i+1), RaftAddr: addrs[3+i], APIAddr: "http://" + addrs[i]})
	}
	nodes := make([]*tokenservice.Server, len(peers))
	errs := make([]error, len(peers))
	var wg sync.WaitGroup
	for i, p := range peers {
		wg.Go(func() {
			nodes[i], errs[i] = tokenservice.Start(ctx, tokenservice.Config{Config: raftstore.Config{
				ID: p.ID, DataDir: filepath.Join(dir, p.ID), RaftAddr: p.RaftAddr, APIAddr: p.APIAddr,
				Peers: peers, Logger: slog.New(slog.DiscardHandler),
			}})
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		for _, n := range nodes {
			if n != nil {
				n.Close()
			}
		}
		return nil, err
	}
	return nodes, nil
}
