package tokenservice_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/pki"
	"github.com/fencegate/fencegate/tokenapi"
	"github.com/fencegate/fencegate/tokenclient"
	"github.com/fencegate/fencegate/tokenservice"
	"github.com/fencegate/fencegate/tokenservice/tokenservicetest"
)

// forgedToken is what the attacker hands out: far above anything minted.
const forgedToken = int64(9_000_000_000_000_000_000)

// attacker is an HTTP(S) server that answers every allocation and token
// request with forgedToken.
type attacker struct {
	addr  string
	conns atomic.Int64
}

func startAttacker(t *testing.T, cfg *tls.Config) *attacker {
	t.Helper()
	a := &attacker{}
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Count     int      `json:"count"`
			Resource  string   `json:"resource"`
			Resources []string `json:"resources"`
		}
		_ = json.NewDecoder(r.Body).Decode(&req)
		w.Header().Set("Content-Type", "application/json")
		switch {
		case req.Count > 0:
			json.NewEncoder(w).Encode(map[string]any{"first": forgedToken, "count": req.Count, "term": 99, "index": 99, "leader": "n1"})
		case len(req.Resources) > 0:
			var toks []map[string]any
			for i, res := range req.Resources {
				toks = append(toks, map[string]any{"resource": res, "token": forgedToken + int64(i)})
			}
			json.NewEncoder(w).Encode(map[string]any{"tokens": toks, "term": 99, "index": 99, "leader": "n1"})
		default:
			json.NewEncoder(w).Encode(map[string]any{"resource": req.Resource, "token": forgedToken, "term": 99, "index": 99, "leader": "n1"})
		}
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	a.addr = ln.Addr().String()
	ln = &countingListener{Listener: ln, n: &a.conns}
	if cfg != nil {
		ln = tls.NewListener(ln, cfg)
	}
	srv := &http.Server{Handler: mux, ErrorLog: log.New(io.Discard, "", 0)}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return a
}

type countingListener struct {
	net.Listener
	n *atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.n.Add(1)
	}
	return c, err
}

// Must show: a forged member address cannot make any node hand out a token
// that the leader's state machine did not mint. An attacker runs a server
// that answers allocations and token requests with 9e18, and gets it put
// where the leader's API should be, in the two ways open to it: on the
// network (the followers' connections to the leader's API address reach
// the attacker instead) and in the replicated member table (POST
// /v1/members naming the leader with the attacker's address, and PUT
// /v1/members/{leader}/api-addr, each tried with every identity). The attacker's server is tried in every disguise: plain
// HTTP, a peer certificate of another CA named like the leader, a client
// certificate of the cluster CA named like the leader, and a genuine peer
// certificate of another node of the cluster. Clients pinned to the
// followers, and a client that follows the leader a node names, keep
// asking for tokens. No token anyone receives is above what the state
// machines minted, and the attacker was contacted (else the test tested
// nothing).
func TestForgedLeaderAddressNeverRelayed(t *testing.T) {
	t.Parallel()
	ca, other := newCA(t, "cluster"), newCA(t, "attacker")
	disguises := []struct {
		name string
		tls  func(leaderID, otherID string) *tls.Config
	}{
		{"plain HTTP", func(string, string) *tls.Config { return nil }},
		{"peer certificate of another CA named like the leader", func(l, _ string) *tls.Config { return serverTLS(t, other, l, tokenapi.RolePeer) }},
		{"client certificate of the cluster CA named like the leader", func(l, _ string) *tls.Config { return serverTLS(t, ca, l, tokenapi.RoleClient) }},
		{"genuine peer certificate of another node", func(_, o string) *tls.Config { return serverTLS(t, ca, o, tokenapi.RolePeer) }},
	}
	for _, d := range disguises {
		t.Run(d.name, func(t *testing.T) {
			var hijack atomic.Pointer[[2]string] // leader API HOST:PORT -> attacker
			c := tokenservicetest.StartCluster(t, 3, tokenservicetest.WithCA(ca, nil), tokenservicetest.WithConfig(func(_ int, cfg *tokenservice.Config) {
				inner := cfg.Dial
				cfg.Dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
					if h := hijack.Load(); h != nil && addr == h[0] {
						addr = h[1]
					}
					return inner(ctx, network, addr)
				}
			}))
			leader := c.Leader(t)
			leaderID := c.ID(leader)
			otherID := c.ID((leader + 1) % 3)
			atk := startAttacker(t, d.tls(leaderID, otherID))
			clientOpts := tokenservicetest.ClientTLS(t, ca, "app", tokenapi.RoleClient)

			// 1. On the network.
			hijack.Store(&[2]string{strings.TrimPrefix(c.APIURL(leader), "https://"), atk.addr})
			c.ResetAPI() // the followers' kept-alive connections to the leader go
			takeTokens(t, c, leader, clientOpts)
			if atk.conns.Load() == 0 {
				t.Fatal("no node contacted the attacker: the hijack was not exercised")
			}
			hijack.Store(nil)

			// 2. In the member table, with every identity.
			forged := fmt.Sprintf(`{"id":%q,"raft_addr":%q,"api_addr":"https://%s"}`, leaderID, c.Node(leader).RaftAddr(), atk.addr)
			registered := false
			for _, id := range []struct {
				name string
				tls  *tls.Config
			}{
				{"nothing", tokenclient.ClientTLSConfig(ca.Pool())},
				{"client", issueTLS(t, ca, ca, "app", pki.Options{}, tokenapi.RoleClient)},
				{"peer of another node", issueTLS(t, ca, ca, otherID, pki.Options{}, tokenapi.RolePeer)},
				{"admin", issueTLS(t, ca, ca, "ops", pki.Options{}, tokenapi.RoleAdmin)},
			} {
				// The member's own path: only the leader itself may
				// publish the leader's address, and nobody here is it.
				put := sendJSON(t, http.MethodPut, c.APIURL(leader)+"/v1/members/"+leaderID+"/api-addr", id.tls, fmt.Sprintf(`{"api_addr":"https://%s"}`, atk.addr))
				if want := map[bool]int{true: http.StatusUnauthorized, false: http.StatusForbidden}[id.name == "nothing"]; put != want {
					t.Fatalf("PUT /v1/members/%s/api-addr as %s: %d; want %d", leaderID, id.name, put, want)
				}
				status := postMember(t, c.APIURL(leader), id.tls, forged)
				switch {
				case status == http.StatusOK:
					if id.name != "admin" {
						t.Fatalf("POST /v1/members as %s: 200; only an admin may change membership", id.name)
					}
					registered = true
				case id.name == "nothing" && status != http.StatusUnauthorized, (id.name == "client" || strings.HasPrefix(id.name, "peer")) && status != http.StatusForbidden:
					t.Fatalf("POST /v1/members as %s: %d; want 401 without identity, 403 for a role other than admin", id.name, status)
				}
				t.Logf("POST /v1/members naming %s at the attacker, as %s: %d", leaderID, id.name, status)
			}
			if registered {
				before := atk.conns.Load()
				takeTokens(t, c, leader, clientOpts)
				if atk.conns.Load() == before {
					t.Error("the forged address was recorded but no node contacted the attacker")
				}
			} else {
				t.Log("the membership rules refused even the admin's forged address")
			}
		})
	}
}

// takeTokens asks for tokens through clients pinned to each node and one
// that follows the leader nodes name, and fails on any token above what
// the nodes' state machines minted. The leader-pinned client must succeed:
// the service still works for honest callers.
func takeTokens(t *testing.T, c *tokenservicetest.Cluster, leader int, opts []tokenclient.ClientOption) {
	t.Helper()
	var mu sync.Mutex
	var got []int64
	failures := 0
	var wg sync.WaitGroup
	run := func(cl *tokenclient.Client, must bool) {
		defer wg.Done()
		// A call that may be sent towards the attacker gets a short
		// deadline; the leader's own answers get one a loaded machine
		// cannot miss.
		timeout := 600 * time.Millisecond
		if must {
			timeout = 10 * time.Second
		}
		for range 5 {
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			tok, err := cl.NextToken(ctx, "orders/42")
			cancel()
			mu.Lock()
			if err == nil {
				got = append(got, tok)
			} else {
				failures++
				if must {
					t.Errorf("token from the leader itself: %v", err)
				}
			}
			mu.Unlock()
		}
	}
	for i, u := range c.APIURLs() {
		wg.Add(1)
		go run(c.ClientFor(t, []string{u}, append(opts, tokenclient.WithFollowLeader(false), tokenclient.WithCoalescing(false))...), i == leader)
	}
	wg.Add(1)
	go run(c.Client(t, opts...), false)
	wg.Wait()
	var minted int64
	for i := range c.Len() {
		minted = max(minted, c.Node(i).LocalStatus().LastToken)
	}
	for _, tok := range got {
		if tok > minted {
			t.Fatalf("a client received token %d, but the state machines minted only up to %d", tok, minted)
		}
	}
	t.Logf("%d tokens received, all <= %d minted; %d calls failed", len(got), minted, failures)
}

func postMember(t *testing.T, url string, cfg *tls.Config, body string) int {
	t.Helper()
	return sendJSON(t, http.MethodPost, url+"/v1/members", cfg, body)
}

// sendJSON sends body to url with method over TLS with cfg and returns the
// status.
func sendJSON(t *testing.T, method, url string, cfg *tls.Config, body string) int {
	t.Helper()
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}, Timeout: 10 * time.Second}
	defer hc.CloseIdleConnections()
	req, err := http.NewRequest(method, url, bytes.NewReader([]byte(body)))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	resp.Body.Close()
	return resp.StatusCode
}
