package tokenservice_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/pki"
	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/fencegate/fencegate/tokenapi"
	"github.com/fencegate/fencegate/tokenclient"
	"github.com/fencegate/fencegate/tokenservice"
	"github.com/fencegate/fencegate/tokenservice/tokenservicetest"
)

// hostPort is the HOST:PORT of an API URL.
func hostPort(u string) string {
	_, rest, _ := strings.Cut(u, "://")
	return rest
}

// strangerConns opens up to n TCP connections to addr from source IP src
// and sends nothing on them: a stranger holding idle connections.
func strangerConns(t *testing.T, addr, src string, n int) []net.Conn {
	t.Helper()
	d := net.Dialer{Timeout: 2 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
	var out []net.Conn
	for range n {
		c, err := d.Dial("tcp", addr)
		if err != nil {
			break
		}
		out = append(out, c)
	}
	t.Cleanup(func() {
		for _, c := range out {
			c.Close()
		}
	})
	return out
}

// closedByServer reports whether the server closed c: a read ends with EOF
// or a reset rather than a timeout.
func closedByServer(c net.Conn) bool {
	_ = c.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	var b [512]byte
	for {
		_, err := c.Read(b[:])
		if err == nil {
			continue // an answer the server sent before closing
		}
		var ne net.Error
		return !(errors.As(err, &ne) && ne.Timeout())
	}
}

// waitClosed waits (up to 30s) until the server closed c.
func waitClosed(t *testing.T, c net.Conn, what string) {
	t.Helper()
	testutil.WaitFor(t, 30*time.Second, what, func() error {
		if !closedByServer(c) {
			return errors.New("the connection is still open")
		}
		return nil
	})
}

// A stranger who opens idle connections from several source IPs up to the
// node's connection caps does not keep an authorised client out: the
// client gets its token at once, the node closing the stranger's oldest
// connections to make room, and the stranger never holds more than the cap.
func TestStrangerAtConnectionCapDoesNotBlockClient(t *testing.T) {
	t.Parallel()
	ca := newCA(t, "limits")
	c := tokenservicetest.StartCluster(t, 1, tokenservicetest.WithCA(ca, nil), tokenservicetest.WithConfig(func(i int, cfg *tokenservice.Config) {
		cfg.MaxConns, cfg.MaxConnsPerIP = 6, 3
	}))
	addr := hostPort(c.APIURL(0))
	var held []net.Conn
	for _, src := range []string{"127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5"} {
		held = append(held, strangerConns(t, addr, src, 5)...)
	}
	// Every connection beyond the caps was closed by the node.
	testutil.WaitFor(t, 30*time.Second, "the stranger holding at most 6 connections", func() error {
		open := 0
		for _, hc := range held {
			if !closedByServer(hc) {
				open++
			}
		}
		if open > 6 {
			return fmt.Errorf("%d of the stranger's %d connections are open", open, len(held))
		}
		return nil
	})
	cl := c.ClientFor(t, []string{c.APIURL(0)}, append(tokenservicetest.ClientTLS(t, ca, "app", tokenapi.RoleClient),
		tokenclient.WithMaxWait(10*time.Second), tokenclient.WithCoalescing(false))...)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := cl.NextToken(ctx, "orders/1"); err != nil {
		t.Fatalf("authorised client while a stranger holds the connection cap: %v", err)
	}
	// The client's kept-alive connection is authenticated: a stranger
	// filling the cap again does not close it.
	for _, src := range []string{"127.0.0.6", "127.0.0.7", "127.0.0.8"} {
		strangerConns(t, addr, src, 3)
	}
	if _, err := cl.NextToken(ctx, "orders/1"); err != nil {
		t.Fatalf("authorised client after the stranger came back: %v", err)
	}
}

// A body trickled in byte by byte is cut off by the read timeout, before
// the handler ever answers; an idle kept-alive connection is closed after
// the idle timeout; a connection that sends nothing is closed after the
// read-header timeout; and a caller refused for want of an identity loses
// its connection with the answer.
func TestStrangerConnectionsAreBounded(t *testing.T) {
	t.Parallel()
	ca := newCA(t, "limits")
	c := tokenservicetest.StartCluster(t, 1, tokenservicetest.WithCA(ca, nil), tokenservicetest.WithConfig(func(i int, cfg *tokenservice.Config) {
		cfg.ReadHeaderTimeout, cfg.ReadTimeout, cfg.IdleTimeout = time.Second, 2*time.Second, time.Second
	}))
	addr := hostPort(c.APIURL(0))
	dialTLS := func(t *testing.T, withCert bool) *tls.Conn {
		t.Helper()
		cfg := tokenclient.ClientTLSConfig(ca.Pool())
		if withCert {
			leaf, err := ca.Issue("app", []string{string(tokenapi.RoleClient)}, nil, pki.Options{})
			if err != nil {
				t.Fatal(err)
			}
			cfg = tokenclient.ClientTLSConfig(ca.Pool(), leaf.TLSCertificate())
		}
		tc, err := tls.Dial("tcp", addr, cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { tc.Close() })
		return tc
	}

	t.Run("trickled body", func(t *testing.T) {
		tc := dialTLS(t, true)
		if _, err := fmt.Fprintf(tc, "POST /v1/tokens HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 4000\r\n\r\n{\"resource\":\""); err != nil {
			t.Fatal(err)
		}
		cut := false
		for i := 0; i < 300 && !cut; i++ { // 30s of trickling at most
			if _, err := tc.Write([]byte("a")); err != nil {
				cut = true
				break
			}
			cut = closedByServer(tc)
			time.Sleep(80 * time.Millisecond)
		}
		if !cut {
			t.Fatal("a body trickled for 30s still held the connection")
		}
	})
	t.Run("idle after a request", func(t *testing.T) {
		tc := dialTLS(t, true)
		fmt.Fprintf(tc, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(tc), nil)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("healthz: %v %v", resp, err)
		}
		io.Copy(io.Discard, resp.Body)
		waitClosed(t, tc, "the idle connection closed")
	})
	t.Run("nothing sent", func(t *testing.T) {
		conns := strangerConns(t, addr, "127.0.0.2", 1)
		if len(conns) != 1 {
			t.Fatal("could not connect")
		}
		waitClosed(t, conns[0], "the silent connection closed")
	})
	t.Run("refused caller", func(t *testing.T) {
		tc := dialTLS(t, false)
		fmt.Fprintf(tc, "GET /v1/status HTTP/1.1\r\nHost: x\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(tc), nil)
		if err != nil || resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("status without identity: %v %v; want 401", resp, err)
		}
		if !resp.Close {
			t.Errorf("the 401 answer keeps the connection open (no Connection: close)")
		}
	})
}

// At the process's file descriptor limit, a stranger's idle connections do
// not keep an authorised client out: a `fencegate token serve` run with a
// small RLIMIT_NOFILE still hands the client a token while a stranger
// holds every connection it can open.
func TestStrangerAtFileLimitDoesNotBlockClient(t *testing.T) {
	t.Parallel()
	prlimit, err := exec.LookPath("prlimit")
	if err != nil {
		t.Fatalf("prlimit (util-linux) not found: %v", err)
	}
	dir := t.TempDir()
	certs := filepath.Join(dir, "certs")
	if code, _, stderr := runCLI(t, "token", "certs", "--out", certs, "--client", "app", "--node", "n1=127.0.0.1"); code != 0 {
		t.Fatalf("token certs: exit %d\n%s", code, stderr)
	}
	raft, api := testutil.FreeAddr(t), testutil.FreeAddr(t)
	p := &proc{t: t, name: "n1", wrap: []string{prlimit, "--nofile=128:128", "--"}, args: []string{
		"token", "serve", "--id", "n1", "--data-dir", filepath.Join(dir, "n1"),
		"--raft-addr", raft, "--api-addr", api, "--peers", "n1=" + raft + "=" + api,
		"--tls-ca", filepath.Join(certs, "ca.pem"), "--tls-cert", filepath.Join(certs, "n1.pem"), "--tls-key", filepath.Join(certs, "n1-key.pem"),
	}}
	startAll(t, []*proc{p})
	// The stranger: 400 idle connections from four source IPs, far more
	// descriptors than the node has.
	n := 0
	for _, src := range []string{"127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5"} {
		n += len(strangerConns(t, api, src, 100))
	}
	t.Logf("the stranger opened %d connections", n)
	code, out, stderr := runCLI(t, "token", "next", "orders/42", "--servers", api, "--timeout", "8s",
		"--tls-ca", filepath.Join(certs, "ca.pem"), "--tls-cert", filepath.Join(certs, "client-app.pem"), "--tls-key", filepath.Join(certs, "client-app-key.pem"))
	if code != 0 {
		t.Fatalf("token next while a stranger holds the node's descriptors: exit %d\n%s", code, stderr)
	}
	if tok, err := strconv.ParseInt(strings.TrimSpace(out), 10, 64); err != nil || tok < 1 {
		t.Fatalf("token next printed %q", out)
	}
}
