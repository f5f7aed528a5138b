package tokenservice_test

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/pki"
	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/fencegate/fencegate/raftstore"
	"github.com/fencegate/fencegate/tokenapi"
	"github.com/fencegate/fencegate/tokenclient"
	"github.com/fencegate/fencegate/tokenservice"
)

// impostor answers the questions an empty node asks before it founds as
// an empty, founding node named id would, with the given voters, over TLS
// with cfg (plain HTTP when nil). It counts the requests it answered.
type impostor struct {
	addr     string
	answered atomic.Int64
}

func startImpostor(t *testing.T, cfg *tls.Config, id string, voters []tokenapi.Peer) *impostor {
	t.Helper()
	im := &impostor{}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/internal/state", func(w http.ResponseWriter, r *http.Request) {
		im.answered.Add(1)
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(raftstore.NodeState{NodeID: id, DataDirID: "d-impostor", Phase: raftstore.PhaseFounding, Peers: voters})
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	im.addr = ln.Addr().String()
	if cfg != nil {
		ln = tls.NewListener(ln, cfg)
	}
	srv := &http.Server{Handler: mux, ErrorLog: log.New(io.Discard, "", 0)}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return im
}

// Must show: the founding probe over mutual TLS counts only the peer
// itself. An empty node n1 of a two-node cluster asks n2 what it holds
// before it may found; at n2's API address an impostor answers "empty,
// founding, same voters", which would let n1 found. The impostor is tried
// in every disguise: plain HTTP, a peer certificate of another CA named
// n2, a client certificate of the cluster CA named n2, and a genuine peer
// certificate of another node (n3). In each, n1 never founds: it gives up
// after its founding timeout saying n2 does not answer, with no Raft state
// in its data directory. The control, the same impostor with n2's own
// certificate, is believed: the check is what refuses the others. While n1
// waits, its own founding questions refuse a caller without a peer
// certificate (401) and one with a client certificate (403).
func TestFoundingProbeRefusesStrangers(t *testing.T) {
	t.Parallel()
	ca, other := newCA(t, "cluster"), newCA(t, "stranger")
	for _, d := range []struct {
		name  string
		tls   *tls.Config
		found bool
	}{
		{"plain HTTP", nil, false},
		{"peer certificate of another CA named n2", serverTLS(t, other, "n2", tokenapi.RolePeer), false},
		{"client certificate of the cluster CA named n2", serverTLS(t, ca, "n2", tokenapi.RoleClient), false},
		{"genuine peer certificate of n3", serverTLS(t, ca, "n3", tokenapi.RolePeer), false},
		{"control: n2's own peer certificate", serverTLS(t, ca, "n2", tokenapi.RolePeer), true},
	} {
		t.Run(d.name, func(t *testing.T) {
			raft1, api1, raft2 := loopbackAddr(t), loopbackAddr(t), closedAddr(t)
			voters := []tokenapi.Peer{{ID: "n1", RaftAddr: raft1}, {ID: "n2", RaftAddr: raft2}}
			im := startImpostor(t, d.tls, "n2", voters)
			leaf, err := ca.Issue("n1", []string{string(tokenapi.RolePeer)}, []string{"127.0.0.1"}, pki.Options{})
			if err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			cfg := tokenservice.Config{
				Config: raftstore.Config{
					ID:       "n1",
					DataDir:  dir,
					RaftAddr: raft1,
					APIAddr:  api1,
					Peers: []tokenapi.Peer{
						{ID: "n1", RaftAddr: raft1, APIAddr: "https://" + api1},
						{ID: "n2", RaftAddr: raft2, APIAddr: "https://" + im.addr},
					},
					FoundingTimeout:    3 * time.Second,
					Logger:             testutil.Logger(t).With("node", "n1"),
					HeartbeatTimeout:   200 * time.Millisecond,
					ElectionTimeout:    200 * time.Millisecond,
					LeaderLeaseTimeout: 150 * time.Millisecond,
				},
				TLS: &tokenservice.NodeTLS{CA: ca.Pool(), Cert: leaf.TLSCertificate()},
			}
			type result struct {
				srv *tokenservice.Server
				err error
			}
			done := make(chan result, 1)
			cfg = bound(t, cfg)
			go func() {
				srv, err := tokenservice.Start(context.Background(), cfg)
				done <- result{srv, err}
			}()
			if !d.found {
				// While n1 decides, its founding questions are closed to
				// strangers too.
				for _, c := range []struct {
					name   string
					tls    *tls.Config
					status int
				}{
					{"no certificate", tokenclient.ClientTLSConfig(ca.Pool()), http.StatusUnauthorized},
					{"client certificate", issueTLS(t, ca, ca, "app", pki.Options{}, tokenapi.RoleClient), http.StatusForbidden},
				} {
					hc := &http.Client{Transport: &http.Transport{TLSClientConfig: c.tls}, Timeout: 5 * time.Second}
					var status int
					testutil.WaitFor(t, 5*time.Second, "n1's API", func() error {
						resp, err := hc.Get("https://" + api1 + "/v1/internal/state")
						if err != nil {
							return err
						}
						body, _ := io.ReadAll(resp.Body)
						resp.Body.Close()
						status = resp.StatusCode
						if strings.Contains(string(body), "d-") {
							t.Errorf("GET /v1/internal/state with %s answered the state: %s", c.name, body)
						}
						return nil
					})
					hc.CloseIdleConnections()
					if status != c.status {
						t.Errorf("GET /v1/internal/state of a deciding node with %s: %d, want %d", c.name, status, c.status)
					}
				}
			}
			var r result
			select {
			case r = <-done:
			case <-time.After(30 * time.Second):
				t.Fatal("Start neither founded nor gave up within 30s")
			}
			if r.srv != nil {
				t.Cleanup(r.srv.Kill)
			}
			if d.found {
				if r.err != nil {
					t.Fatalf("n1 did not believe n2's own certificate: %v", r.err)
				}
				if im.answered.Load() == 0 {
					t.Fatal("n1 founded without asking n2")
				}
				return
			}
			if !errors.Is(r.err, raftstore.ErrWaitTimeout) || !strings.Contains(r.err.Error(), "n2") {
				t.Fatalf("Start = %v; want ErrWaitTimeout naming n2", r.err)
			}
			t.Log(r.err)
			if d.tls != nil && im.answered.Load() > 0 && !strings.Contains(r.err.Error(), "certificate") {
				t.Errorf("the impostor answered but the refusal does not name its certificate: %v", r.err)
			}
			b, err := os.ReadFile(filepath.Join(dir, "cluster.json"))
			if err != nil {
				t.Fatal(err)
			}
			var id struct {
				RaftStarted bool            `json:"raft_started"`
				Founding    json.RawMessage `json:"founding"`
			}
			if err := json.Unmarshal(b, &id); err != nil || id.RaftStarted || id.Founding != nil {
				t.Fatalf("n1's data dir records a founding after refusing to found: %s (%v)", b, err)
			}
		})
	}
}
