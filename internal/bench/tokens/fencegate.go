package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
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
			"--peers", strings.Join(peers, ","))
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

// httpMinter asks the token service for tokens over its HTTP API: POST
// /v1/tokens to the node it believes leads, following the "leader" field of
// each answer, moving to the next node on failure. Followers forward, so a
// stale guess costs a hop, not an error.
type httpMinter struct {
	client   *http.Client
	ids      []string
	urls     []string
	cur      atomic.Int32 // index of the node requests go to
	body     []byte
	resource string
}

func newHTTPMinter(c *fencegateCluster, resource string, conc int) *httpMinter {
	tr := &http.Transport{
		MaxIdleConnsPerHost: max(conc, 2),
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
	}
	body, _ := json.Marshal(map[string]string{"resource": resource})
	return &httpMinter{
		client: &http.Client{Transport: tr, Timeout: 10 * time.Second},
		ids:    c.ids, urls: c.urls, body: body, resource: resource,
	}
}

type tokenAnswer struct {
	Resource string `json:"resource"`
	Token    int64  `json:"token"`
	Term     uint64 `json:"term"`
	Index    uint64 `json:"index"`
	Leader   string `json:"leader"`
}

// Next returns a fresh token for the resource.
func (m *httpMinter) Next(ctx context.Context) (int64, error) {
	i := int(m.cur.Load())
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, m.urls[i]+"/v1/tokens", bytes.NewReader(m.body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := m.client.Do(req)
	if err != nil {
		m.cur.CompareAndSwap(int32(i), int32((i+1)%len(m.urls)))
		return 0, fmt.Errorf("next token from %s: %w", m.ids[i], err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		m.cur.CompareAndSwap(int32(i), int32((i+1)%len(m.urls)))
		return 0, fmt.Errorf("next token from %s: %s: %s", m.ids[i], resp.Status, bytes.TrimSpace(msg))
	}
	var a tokenAnswer
	if err := json.NewDecoder(resp.Body).Decode(&a); err != nil {
		return 0, fmt.Errorf("next token from %s: decode answer: %w", m.ids[i], err)
	}
	if a.Token <= 0 {
		return 0, errors.New("next token: answer holds no token")
	}
	if a.Leader != "" && a.Leader != m.ids[i] {
		for j, id := range m.ids {
			if id == a.Leader {
				m.cur.CompareAndSwap(int32(i), int32(j))
			}
		}
	}
	return a.Token, nil
}

// Close releases idle connections.
func (m *httpMinter) Close() error {
	m.client.CloseIdleConnections()
	return nil
}
