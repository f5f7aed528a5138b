package main

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/fencegate/fencegate/internal/freeport"
	"github.com/fencegate/fencegate/internal/proc"
)

// etcdCluster is three etcd members on loopback, formed with the static
// --initial-cluster bootstrap, fsync on (etcd's default).
type etcdCluster struct {
	clientURLs []string
	procs      nodes
	tls        *benchTLS // nil: plain HTTP
}

// startEtcd starts the members under g with data in dir and waits until
// each one reports itself healthy (it has a leader). With tc the members
// speak mutual TLS to clients and to each other (--client-cert-auth,
// --peer-client-cert-auth), as fencegate does with TLS on.
func startEtcd(ctx context.Context, g *proc.Group, etcdBin, dir string, tc *benchTLS) (*etcdCluster, error) {
	ports, err := freeport.Ports(6)
	if err != nil {
		return nil, err
	}
	c := &etcdCluster{tls: tc}
	scheme := tc.choose("http://", "https://")
	var names, peerURLs, initial []string
	for i := range 3 {
		name := "e" + strconv.Itoa(i+1)
		peer := scheme + "127.0.0.1:" + strconv.Itoa(ports[2*i])
		names = append(names, name)
		peerURLs = append(peerURLs, peer)
		c.clientURLs = append(c.clientURLs, scheme+"127.0.0.1:"+strconv.Itoa(ports[2*i+1]))
		initial = append(initial, name+"="+peer)
	}
	token := "fencegate-bench-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	for i, name := range names {
		args := []string{"--name", name,
			"--data-dir", filepath.Join(dir, name),
			"--listen-peer-urls", peerURLs[i],
			"--initial-advertise-peer-urls", peerURLs[i],
			"--listen-client-urls", c.clientURLs[i],
			"--advertise-client-urls", c.clientURLs[i],
			"--initial-cluster", strings.Join(initial, ","),
			"--initial-cluster-state", "new",
			"--initial-cluster-token", token,
			"--logger", "zap",
			"--log-level", "warn"}
		if tc != nil {
			cert, key, err := tc.server("etcd-" + name)
			if err != nil {
				return nil, err
			}
			args = append(args, "--cert-file", cert, "--key-file", key, "--trusted-ca-file", tc.caFile, "--client-cert-auth",
				"--peer-cert-file", cert, "--peer-key-file", key, "--peer-trusted-ca-file", tc.caFile, "--peer-client-cert-auth")
		}
		p, err := g.Start("etcd-"+name+tc.choose("", "-tls"), etcdBin, args)
		if err != nil {
			return nil, err
		}
		c.procs = append(c.procs, p)
	}
	var hc *http.Client
	if tc != nil {
		hc = &http.Client{Transport: &http.Transport{TLSClientConfig: tc.etcdClient()}}
	}
	if err := c.procs.waitReady(ctx, hc, c.clientURLs, "/health"); err != nil {
		return nil, err
	}
	return c, nil
}

// leaderURL returns the client URL of the member that currently leads.
func (c *etcdCluster) leaderURL(ctx context.Context) (string, error) {
	cli, err := newEtcdClient(c.clientURLs, c.tls)
	if err != nil {
		return "", err
	}
	defer cli.Close()
	var errs []string
	for _, u := range c.clientURLs {
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		st, err := cli.Status(sctx, u)
		cancel()
		if err != nil {
			errs = append(errs, err.Error())
			continue
		}
		if st.Header.MemberId == st.Leader {
			return u, nil
		}
	}
	return "", fmt.Errorf("find etcd leader: no member says it leads (%s)", strings.Join(errs, "; "))
}

func newEtcdClient(endpoints []string, tc *benchTLS) (*clientv3.Client, error) {
	cfg := clientv3.Config{
		Endpoints:   endpoints,
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
	}
	if tc != nil {
		cfg.TLS = tc.etcdClient()
	}
	cli, err := clientv3.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("connect to etcd %s: %w", strings.Join(endpoints, ","), err)
	}
	return cli, nil
}

// etcdMinter issues a token as the revision of a Put of the resource's key,
// which is what an etcd lock's fencing token is (the revision of its key).
type etcdMinter struct {
	cli *clientv3.Client
	key string
}

func newEtcdMinter(endpoints []string, tc *benchTLS, resource string) (*etcdMinter, error) {
	cli, err := newEtcdClient(endpoints, tc)
	if err != nil {
		return nil, err
	}
	return &etcdMinter{cli: cli, key: "fencegate-bench/" + resource}, nil
}

// Next puts the key and returns the revision of that write.
func (m *etcdMinter) Next(ctx context.Context) (int64, error) {
	resp, err := m.cli.Put(ctx, m.key, "holder")
	if err != nil {
		return 0, fmt.Errorf("put %s: %w", m.key, err)
	}
	return resp.Header.Revision, nil
}

// Close closes the client's connections.
func (m *etcdMinter) Close() error { return m.cli.Close() }
