package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/fencegate/fencegate/internal/freeport"
	"github.com/fencegate/fencegate/internal/proc"
)

// fencegateCluster is three "fencegate token serve" processes on loopback.
type fencegateCluster struct {
	ids   []string
	urls  []string // API base URLs, in the order of ids
	procs nodes
	tls   *benchTLS // nil: plain HTTP
	hc    *http.Client
}

// followerPids returns the processes of the nodes that do not lead, by
// the leader a node's status names.
func (c *fencegateCluster) followerPids(ctx context.Context) ([]int, error) {
	b, err := get(ctx, c.hc, c.urls[0]+"/v1/status")
	if err != nil {
		return nil, err
	}
	var st struct {
		LeaderID string `json:"leader_id"`
	}
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, err
	}
	var out []int
	for i, id := range c.ids {
		if id != st.LeaderID {
			out = append(out, c.procs[i].Pid())
		}
	}
	if len(out) != len(c.ids)-1 {
		return nil, fmt.Errorf("status names leader %q, not one of %v", st.LeaderID, c.ids)
	}
	return out, nil
}

// roundCounters are the read-index path's counters, summed over the nodes.
type roundCounters struct {
	rounds, seconds float64
}

// roundCounters scrapes every node's metrics for its confirmation rounds.
func (c *fencegateCluster) roundCounters(ctx context.Context) (roundCounters, error) {
	var out roundCounters
	for _, u := range c.urls {
		b, err := get(ctx, c.hc, u+"/metrics")
		if err != nil {
			return out, err
		}
		for _, line := range strings.Split(string(b), "\n") {
			name, v, ok := strings.Cut(line, " ")
			if !ok {
				continue
			}
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				continue
			}
			switch name {
			case "fencegate_token_rounds_total":
				out.rounds += f
			case "fencegate_token_round_seconds_total":
				out.seconds += f
			}
		}
	}
	return out, nil
}

// startFencegate starts a three-node token cluster under g with data in
// dir, and waits until every node answers /readyz with 200. With tc the
// nodes run with TLS (API, Raft, forwarding) and authentication.
func startFencegate(ctx context.Context, g *proc.Group, bin, dir string, tc *benchTLS, extra ...string) (*fencegateCluster, error) {
	ports, err := freeport.Ports(6)
	if err != nil {
		return nil, err
	}
	c := &fencegateCluster{tls: tc}
	scheme := tc.choose("http://", "https://")
	var peers []string
	for i := range 3 {
		id := "n" + strconv.Itoa(i+1)
		raft := "127.0.0.1:" + strconv.Itoa(ports[2*i])
		api := scheme + "127.0.0.1:" + strconv.Itoa(ports[2*i+1])
		c.ids = append(c.ids, id)
		c.urls = append(c.urls, api)
		peers = append(peers, id+"="+raft+"="+api)
	}
	for i, id := range c.ids {
		data := filepath.Join(dir, id)
		if err := os.MkdirAll(data, 0o755); err != nil {
			return nil, fmt.Errorf("create data dir: %w", err)
		}
		args := []string{"token", "serve",
			"--id", id,
			"--data-dir", data,
			"--raft-addr", "127.0.0.1:" + strconv.Itoa(ports[2*i]),
			"--api-addr", strings.TrimPrefix(c.urls[i], scheme),
			"--peers", strings.Join(peers, ","),
			"--log-level", "warn"}
		args = append(args, extra...)
		if tc != nil {
			cert, key, err := tc.server(id)
			if err != nil {
				return nil, err
			}
			args = append(args, "--tls-ca", tc.caFile, "--tls-cert", cert, "--tls-key", key)
		}
		p, err := g.Start("fencegate-"+id+tc.choose("", "-tls"), bin, args)
		if err != nil {
			return nil, err
		}
		c.procs = append(c.procs, p)
	}
	c.hc = http.DefaultClient
	if tc != nil {
		c.hc = &http.Client{Transport: &http.Transport{TLSClientConfig: tc.fencegateClient()}}
	}
	if err := c.procs.waitReady(ctx, c.hc, c.urls, "/readyz"); err != nil {
		return nil, err
	}
	return c, nil
}

// nodes are the server processes of a cluster, in the order of its URLs.
type nodes []*proc.Proc

// pids returns the processes' IDs.
func (ns nodes) pids() []int {
	var out []int
	for _, p := range ns {
		out = append(out, p.Pid())
	}
	return out
}

// waitReady waits until GET urls[i]+path answers 200 for every node i.
func (ns nodes) waitReady(ctx context.Context, hc *http.Client, urls []string, path string) error {
	for i, p := range ns {
		if err := p.WaitReady(ctx, 20*time.Millisecond, 60*time.Second, httpOK(hc, urls[i]+path)); err != nil {
			return err
		}
	}
	return nil
}

// httpOK is a readiness check: GET url with hc (http.DefaultClient when
// nil) answers 200.
func httpOK(hc *http.Client, url string) func(context.Context) error {
	return func(ctx context.Context) error {
		_, err := get(ctx, hc, url)
		return err
	}
}

// get returns the body of url's answer to a GET with hc
// (http.DefaultClient when nil), which must be 200.
func get(ctx context.Context, hc *http.Client, url string) ([]byte, error) {
	if hc == nil {
		hc = http.DefaultClient
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return b, err
}
