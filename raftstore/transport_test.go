package raftstore

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/pki"
	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/fencegate/fencegate/tokenapi"
)

// tlsLayerPair returns a TLS layer on 127.0.0.1:0 with a certificate of ca
// for hosts, and its configuration.
func newTestTLSLayer(t *testing.T, ca *pki.CA, name string, hosts ...string) (Layer, *tls.Config) {
	t.Helper()
	testutil.NeedServices(t)
	leaf, err := ca.Issue(name, []string{"peer"}, hosts, pki.Options{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{leaf.TLSCertificate()}, RootCAs: ca.Pool(), ClientCAs: ca.Pool()}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l, err := NewTLSLayer(ln, nil, cfg, TLSLayerOptions{HandshakeTimeout: 2 * time.Second, Logger: testutil.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l, cfg
}

// A TLS layer hands Raft only connections whose peer proved a certificate
// of the CA; it dials only peers whose certificate names the address.
func TestTLSLayer(t *testing.T) {
	ca, err := pki.NewCA("cluster", pki.Options{})
	if err != nil {
		t.Fatal(err)
	}
	other, err := pki.NewCA("other", pki.Options{})
	if err != nil {
		t.Fatal(err)
	}
	a, _ := newTestTLSLayer(t, ca, "a", "127.0.0.1")
	b, _ := newTestTLSLayer(t, ca, "b", "127.0.0.1")
	stranger, _ := newTestTLSLayer(t, other, "a", "127.0.0.1")
	wrongHost, _ := newTestTLSLayer(t, ca, "c", "10.9.9.9")

	accepted := make(chan net.Conn, 8)
	go func() {
		for {
			c, err := a.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()

	// Refused: plain TCP, TLS from another CA.
	raw, err := net.Dial("tcp", a.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	raw.Write([]byte("\x00raft rpc in clear"))
	if _, err := stranger.Dial(ctx, a.Addr().String()); err == nil {
		t.Error("a layer of another CA dialled a successfully")
	}
	// An attacker that skips verifying a, presenting no certificate or one
	// of another CA: a refuses during the handshake.
	strangerLeaf, err := other.Issue("b", []string{"peer"}, []string{"127.0.0.1"}, pki.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, certs := range [][]tls.Certificate{nil, {strangerLeaf.TLSCertificate()}} {
		c, err := tls.Dial("tcp", a.Addr().String(), &tls.Config{InsecureSkipVerify: true, Certificates: certs, MinVersion: tls.VersionTLS13})
		if err != nil {
			continue // refused in the handshake itself
		}
		c.Write([]byte("\x00raft rpc"))
		c.SetReadDeadline(time.Now().Add(3 * time.Second))
		if _, err := c.Read(make([]byte, 1)); err == nil || !strings.Contains(err.Error(), "certificate") {
			t.Errorf("TLS with %d certificates of another CA: read %v; want a certificate alert", len(certs), err)
		}
		c.Close()
	}
	// Accepted: a peer of the CA, in both directions of verification.
	c, err := b.Dial(ctx, a.Addr().String())
	if err != nil {
		t.Fatalf("peer of the same CA: %v", err)
	}
	c.Write([]byte("x"))
	select {
	case got := <-accepted:
		if got.(interface{ ConnectionState() tls.ConnectionState }).ConnectionState().PeerCertificates[0].Subject.CommonName != "b" {
			t.Fatal("accepted connection is not b's")
		}
		got.Close()
	case <-time.After(5 * time.Second):
		t.Fatal("b's connection never reached Accept")
	}
	select {
	case got := <-accepted:
		t.Fatalf("a connection from %v reached Accept without a valid certificate", got.RemoteAddr())
	case <-time.After(300 * time.Millisecond):
	}
	raw.SetReadDeadline(time.Now().Add(3 * time.Second))
	if _, err := raw.Read(make([]byte, 64)); err == nil {
		t.Error("plain TCP connection got bytes back")
	}
	raw.Close()
	c.Close()

	// Dialling checks the address: c's certificate names 10.9.9.9 only.
	if _, err := a.Dial(ctx, wrongHost.Addr().String()); err == nil || !strings.Contains(err.Error(), "127.0.0.1") {
		t.Errorf("dial of a peer whose certificate does not name the address: %v; want a hostname error", err)
	}
}

// pendingProber answers founding probes from nodes of this process, as
// tokenservice does over HTTP: by API address, from the node's Pending
// until it runs.
type pendingProber struct {
	mu    sync.Mutex
	nodes map[string]*Pending
}

func (p *pendingProber) State(ctx context.Context, api string) (NodeState, error) {
	p.mu.Lock()
	n := p.nodes[api]
	p.mu.Unlock()
	if n == nil {
		return NodeState{}, fmt.Errorf("no node at %s", api)
	}
	return n.State(), nil
}

func (p *pendingProber) Configuration(ctx context.Context, api string) (Configuration, error) {
	return Configuration{}, errors.New("not asked when founding")
}

// Stores take their network from the caller: two nodes on 127.0.0.1:0
// over mutual TLS, prepared with their layers, found a cluster together
// (each asks the other first) and replicate.
func TestStoresOverTLSLayer(t *testing.T) {
	ca, err := pki.NewCA("cluster", pki.Options{})
	if err != nil {
		t.Fatal(err)
	}
	la, _ := newTestTLSLayer(t, ca, "n1", "127.0.0.1")
	lb, _ := newTestTLSLayer(t, ca, "n2", "127.0.0.1")
	boot := []tokenapi.Peer{{ID: "n1", RaftAddr: la.Addr().String(), APIAddr: "http://n1"}, {ID: "n2", RaftAddr: lb.Addr().String(), APIAddr: "http://n2"}}
	probe := &pendingProber{nodes: map[string]*Pending{}}
	var pending []*Pending
	for i, l := range []Layer{la, lb} {
		p, err := Prepare(Config{ID: boot[i].ID, DataDir: t.TempDir(), Layer: l, Peers: boot, Probe: probe, Logger: testutil.Logger(t),
			HeartbeatTimeout: 200 * time.Millisecond, ElectionTimeout: 200 * time.Millisecond, LeaderLeaseTimeout: 150 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		probe.nodes[boot[i].APIAddr] = p
		pending = append(pending, p)
	}
	stores := make([]*Store, len(pending))
	errs := make([]error, len(pending))
	var wg sync.WaitGroup
	for i, p := range pending {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			stores[i], errs[i] = p.Start(ctx)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("start %s: %v", boot[i].ID, err)
		}
		t.Cleanup(stores[i].Kill)
	}
	for i, s := range stores {
		if got := s.RaftAddr(); got != boot[i].RaftAddr {
			t.Fatalf("%s advertises %s, want its layer's address %s", boot[i].ID, got, boot[i].RaftAddr)
		}
	}
	var leader *Store
	testutil.Eventually(t, 10*time.Second, "a leader", func() bool {
		for _, s := range stores {
			if s.IsLeader() {
				leader = s
				return true
			}
		}
		return false
	})
	r, err := leader.Allocate(context.Background(), 3)
	if err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "both nodes to apply the allocation", func() bool {
		return stores[0].LastToken() == r.First+2 && stores[1].LastToken() == r.First+2
	})
}

// A layer handed to Prepare is closed when Prepare refuses the
// configuration: the caller never has to.
func TestPrepareClosesLayerOnError(t *testing.T) {
	testutil.NeedServices(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := NewTCPLayer(ln, nil)
	if _, err := Prepare(Config{DataDir: t.TempDir(), Layer: l}); !errors.Is(err, ErrBadConfig) {
		t.Fatalf("Prepare without an id: %v, want ErrBadConfig", err)
	}
	if _, err := ln.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("the layer's listener still accepts after a refused Prepare: %v", err)
	}
}
