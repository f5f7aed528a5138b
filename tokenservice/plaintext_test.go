package tokenservice_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/fencegate/fencegate/raftstore"
	"github.com/fencegate/fencegate/tokenapi"
	"github.com/fencegate/fencegate/tokenservice"
	"github.com/fencegate/fencegate/tokenservice/tokenservicetest"
)

// outsideIP returns an IPv4 address of this host that is not loopback: a
// client dialling the node there reaches it as another host would.
func outsideIP(t *testing.T) string {
	t.Helper()
	testutil.NeedServices(t)
	ifs, err := net.Interfaces()
	if err != nil {
		t.Fatal(err)
	}
	for _, ifc := range ifs {
		if ifc.Flags&net.FlagUp == 0 || ifc.Flags&net.FlagLoopback != 0 {
			continue
		}
		addrs, _ := ifc.Addrs()
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok && ipn.IP.To4() != nil && !ipn.IP.IsLoopback() {
				return ipn.IP.String()
			}
		}
	}
	t.Fatal("this host has no non-loopback IPv4 address to bind the node to")
	return ""
}

// syncBuf is a log sink safe for concurrent writes.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// A node without TLS refuses to bind its API to an address other hosts
// reach unless told (InsecurePlaintext). Told, it logs every route open to
// anyone; a caller from another host mints tokens and reads status there,
// but cannot raise the counter, change membership, set a member's API
// address or allocate ranges: those answer only to loopback and to the
// hosts of the members.
func TestPlaintextOffLoopback(t *testing.T) {
	t.Parallel()
	ip := outsideIP(t)
	dir := t.TempDir()
	raftAddr := loopbackAddr(t)
	apiLn, err := net.Listen("tcp", ip+":0")
	if err != nil {
		t.Fatal(err)
	}
	api := apiLn.Addr().String()
	cfg := func(insecure bool, logs io.Writer) tokenservice.Config {
		c := tokenservice.Config{
			Config: raftstore.Config{
				ID: "n1", DataDir: filepath.Join(dir, "n1"), RaftAddr: raftAddr, APIAddr: api,
				Logger: slog.New(slog.NewTextHandler(logs, nil)),
				Peers:  []tokenapi.Peer{{ID: "n1", RaftAddr: raftAddr, APIAddr: "http://" + api}},
			},
		}
		c.InsecurePlaintext = insecure
		return c
	}
	var logs syncBuf
	// Not told: refused before anything listens or is written.
	apiLn.Close()
	_, err = tokenservice.Start(context.Background(), cfg(false, &logs))
	if !errors.Is(err, tokenservice.ErrBadConfig) || !strings.Contains(err.Error(), "InsecurePlaintext") {
		t.Fatalf("plain HTTP on %s without InsecurePlaintext: %v; want ErrBadConfig naming InsecurePlaintext", api, err)
	}
	// Told: it serves, and says what is open.
	srv, err := tokenservice.Start(context.Background(), bound(t, cfg(true, &logs)))
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	testutil.WaitFor(t, 10*time.Second, "a leader", func() error {
		if srv.LocalStatus().LeaderID != "n1" {
			return errors.New("not leading yet")
		}
		return nil
	})
	logged := logs.String()
	for _, rt := range tokenservice.Routes() {
		name := rt.Method + " " + rt.Path
		if open := tokenservice.PlaintextOpen(rt); open != strings.Contains(logged, name) {
			t.Errorf("the start log lists %q: %v; the route is open to anyone: %v\n%s", name, !open, open, logged)
		}
	}
	call := func(method, path, body string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, "http://"+api+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	// The caller reaches the node from ip: not loopback, and not the host of
	// n1's Raft address (127.0.0.1).
	for _, tc := range []struct{ method, path, body string }{
		{"POST", "/v1/restore", `{"at_least":9223372036854775806}`},
		{"PUT", "/v1/members/n1/api-addr", `{"api_addr":"http://` + ip + `:1"}`},
		{"POST", "/v1/internal/allocate", `{"count":1000000}`},
		{"POST", "/v1/members", `{"id":"n9","raft_addr":"` + ip + `:1","api_addr":"http://` + ip + `:2"}`},
		{"DELETE", "/v1/members/n1", ``},
	} {
		code, body := call(tc.method, tc.path, tc.body)
		if code != http.StatusForbidden || !strings.Contains(body, "forbidden") {
			t.Errorf("%s %s from another host without TLS: %d %s; want 403", tc.method, tc.path, code, body)
		}
	}
	if last := srv.Store().LastToken(); last > 1<<40 {
		t.Fatalf("the counter was raised to %d from another host", last)
	}
	if code, body := call("POST", "/v1/tokens", `{"resource":"orders/1"}`); code != http.StatusOK {
		t.Fatalf("mint from another host: %d %s", code, body)
	}
	if code, body := call("GET", "/v1/status", ""); code != http.StatusOK {
		t.Fatalf("status from another host: %d %s", code, body)
	}
}

// `fencegate token serve` without TLS on an address other hosts reach
// refuses in one line naming --insecure-plaintext, and serves with it.
func TestCLIPlaintextOffLoopback(t *testing.T) {
	t.Parallel()
	ip := outsideIP(t)
	dir := t.TempDir()
	raft := testutil.FreeAddr(t)
	ln, err := net.Listen("tcp", ip+":0")
	if err != nil {
		t.Fatal(err)
	}
	api := ln.Addr().String()
	ln.Close()
	args := []string{"token", "serve", "--id", "n1", "--data-dir", filepath.Join(dir, "n1"),
		"--raft-addr", raft, "--api-addr", api, "--peers", "n1=" + raft + "=http://" + api}
	cliRefuses(t, args, 1, "--insecure-plaintext", api)
	p := &proc{t: t, name: "n1", args: append(args, "--insecure-plaintext")}
	startAll(t, []*proc{p})
	if !strings.Contains(p.tail(), "POST /v1/tokens") {
		t.Errorf("the log does not list the routes open to anyone:\n%s", p.tail())
	}
}

// The API refuses resource names the rule refuses (tokenclient
// tokenapi.ValidateResource): 400 bad_request, nothing signed or echoed. JSON turns
// bytes that are not UTF-8 into U+FFFD, which the rule refuses too.
func TestAPIRefusesBadResourceNames(t *testing.T) {
	t.Parallel()
	c := tokenservicetest.StartCluster(t, 1)
	for _, body := range []string{
		`{"resource":"a\u0000b"}`, "{\"resource\":\"a\xffb\"}", `{"resource":"a\ud800b"}`,
		`{"resources":["ok","a\u0000b"]}`, `{"resource":"` + strings.Repeat("x", 1025) + `"}`,
	} {
		resp, err := http.Post(c.APIURL(0)+"/v1/tokens", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), `"code":"bad_request"`) || strings.Contains(string(b), `"token"`) {
			t.Errorf("POST /v1/tokens %.60q: %d %s; want 400 bad_request", body, resp.StatusCode, b)
		}
	}
}
