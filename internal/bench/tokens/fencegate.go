package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/fencegate/fencegate/internal/bench"
)

// fencegateCluster is three "fencegate token serve" processes on loopback.
type fencegateCluster struct {
	ids  []string
	urls []string // API base URLs, in the order of ids
}

// startFencegate starts a three-node token cluster under g with data in
// dir, and waits until every node answers /readyz with 200.
func startFencegate(ctx context.Context, g *bench.Group, bin, dir string) (*fencegateCluster, error) {
	ports, err := bench.FreePorts(6)
	if err != nil {
		return nil, err
	}
	c := &fencegateCluster{}
	var peers []string
	for i := range 3 {
		id := "n" + strconv.Itoa(i+1)
		raft := "127.0.0.1:" + strconv.Itoa(ports[2*i])
		api := "http://127.0.0.1:" + strconv.Itoa(ports[2*i+1])
		c.ids = append(c.ids, id)
		c.urls = append(c.urls, api)
		peers = append(peers, id+"="+raft+"="+api)
	}
	var procs []*bench.Proc
	for i, id := range c.ids {
		data := filepath.Join(dir, id)
		if err := os.MkdirAll(data, 0o755); err != nil {
			return nil, fmt.Errorf("create data dir: %w", err)
		}
		cmd := exec.Command(bin, "token", "serve",
			"--id", id,
			"--data-dir", data,
			"--raft-addr", "127.0.0.1:"+strconv.Itoa(ports[2*i]),
			"--api-addr", strings.TrimPrefix(c.urls[i], "http://"),
			"--peers", strings.Join(peers, ","),
			"--log-level", "warn")
		p, err := g.Start("fencegate-"+id, cmd)
		if err != nil {
			return nil, err
		}
		procs = append(procs, p)
	}
	for i, p := range procs {
		if err := bench.WaitReady(ctx, p, 60*time.Second, httpOK(c.urls[i]+"/readyz")); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// httpOK is a readiness check: GET url answers 200.
func httpOK(url string) func(context.Context) error {
	return func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		io.Copy(io.Discard, resp.Body)
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET %s: %s", url, resp.Status)
		}
		return nil
	}
}
