package raftstore

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/pki"
	"github.com/fencegate/fencegate/internal/poll"
	"github.com/fencegate/fencegate/internal/testutil"
)

// A flood of idle TCP connections that never start a handshake cannot make
// a TLS layer hold more than its bound on pending handshakes (256 by
// default), and a member on another address still connects meanwhile (the
// oldest connection of the busiest flooding address makes room).
func TestTLSLayerBoundsPendingHandshakes(t *testing.T) {
	testutil.NeedServices(t)
	const bound, sources, perSource = 256, 5, 60 // 300 > bound, each source under 64
	ca, err := pki.NewCA("cluster", pki.Options{})
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := ca.Issue("a", []string{"peer"}, []string{"127.0.0.1"}, pki.Options{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{leaf.TLSCertificate()}, RootCAs: ca.Pool(), ClientCAs: ca.Pool()}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	// A handshake timeout longer than the test: only the bound closes the
	// idle connections.
	a, err := NewTLSLayer(ln, nil, cfg, TLSLayerOptions{HandshakeTimeout: 10 * time.Minute, Logger: testutil.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	b, _ := newTestTLSLayer(t, ca, "b", "127.0.0.1")
	accepted := make(chan net.Conn, 1)
	go func() {
		for {
			c, err := a.Accept()
			if err != nil {
				return
			}
			select {
			case accepted <- c:
			default:
				c.Close()
			}
		}
	}()

	// The flood, from 127.0.0.2..6 (all loopback on Linux): never a byte.
	var closed atomic.Int64
	var flood []net.Conn
	var wg sync.WaitGroup
	t.Cleanup(func() {
		for _, c := range flood {
			c.Close()
		}
		wg.Wait()
	})
	for s := range sources {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(2+s))}}
		for range perSource {
			c, err := d.Dial("tcp", a.Addr().String())
			if err != nil {
				t.Fatalf("flood connection from 127.0.0.%d: %v", 2+s, err)
			}
			flood = append(flood, c)
			wg.Add(1)
			go func() {
				defer wg.Done()
				c.Read(make([]byte, 1)) // returns when the layer closes c
				closed.Add(1)
			}()
		}
	}
	want := int64(len(flood) - bound)
	ctx := context.Background()
	if err := poll.True(ctx, fmt.Sprintf("the layer to close the %d flood connections over its bound", want),
		10*time.Millisecond, 30*time.Second, func() bool { return closed.Load() >= want }); err != nil {
		t.Fatal(err)
	}

	// A member (127.0.0.1, not a flooding address) connects and is served.
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	c, err := b.Dial(dctx, a.Addr().String())
	if err != nil {
		t.Fatalf("member dial during the flood: %v", err)
	}
	defer c.Close()
	select {
	case ac := <-accepted:
		defer ac.Close()
	case <-dctx.Done():
		t.Fatal("the member's connection never reached Raft during the flood")
	}

	// The layer holds no more than the bound: at most one flood connection
	// more was closed to make room for the member.
	l := a.(*tlsLayer)
	l.pendingMu.Lock()
	held := l.pending
	l.pendingMu.Unlock()
	if got := closed.Load(); got > want+1 || held > bound {
		t.Errorf("flood connections closed = %d, pending = %d; want at most %d and %d", got, held, want+1, bound)
	}
}
