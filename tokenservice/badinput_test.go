package tokenservice_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/fencegate/fencegate/raftstore"
	"github.com/fencegate/fencegate/tokenapi"
	"github.com/fencegate/fencegate/tokenservice"
	"github.com/fencegate/fencegate/tokenservice/tokenservicetest"
)

// runCLI runs the fencegate binary and returns its exit code, stdout and stderr.
func runCLI(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(testutil.Binary(t), args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("run fencegate %v: %v", args, err)
	}
	return code, out.String(), errb.String()
}

// cliRefuses runs the binary with args and fails unless it exits with
// code, prints nothing on stdout, and ends stderr with one line holding
// every one of want (usage errors print the flag list before it; other
// errors print that line alone). It returns stderr.
func cliRefuses(t *testing.T, args []string, code int, want ...string) string {
	t.Helper()
	got, stdout, stderr := runCLI(t, args...)
	if got != code {
		t.Fatalf("exit %d, want %d; stderr:\n%s", got, code, stderr)
	}
	if stdout != "" {
		t.Errorf("stdout = %q, want nothing", stdout)
	}
	lines := strings.Split(strings.TrimRight(stderr, "\n"), "\n")
	if code == 1 && len(lines) != 1 {
		t.Errorf("stderr has %d lines, want 1:\n%s", len(lines), stderr)
	}
	oneLine(t, lines[len(lines)-1], want...)
	return stderr
}

// oneLine fails unless s is a single line containing every one of want.
func oneLine(t *testing.T, s string, want ...string) {
	t.Helper()
	s = strings.TrimRight(s, "\n")
	if strings.Contains(s, "\n") {
		t.Errorf("want a one-line error, got:\n%s", s)
	}
	for _, w := range want {
		if !strings.Contains(s, w) {
			t.Errorf("error %q does not mention %q", s, w)
		}
	}
}

func TestCLIBadInput(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	// A data dir that belongs to a one-node cluster n1.
	raft1, api1 := loopbackAddr(t), loopbackAddr(t)
	srv, err := tokenservice.Start(context.Background(), bound(t, tokenservice.Config{
		Config: raftstore.Config{
			ID:       "n1",
			DataDir:  filepath.Join(dir, "n1"),
			RaftAddr: raft1,
			APIAddr:  api1,
			Logger:   testutil.Logger(t),
			Peers:    []tokenapi.Peer{{ID: "n1", RaftAddr: raft1, APIAddr: api1}},
		},
	}))
	if err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 10*time.Second, "n1's cluster id", func() error {
		if srv.LocalStatus().ClusterID == "" {
			return errors.New("not recorded yet")
		}
		return nil
	})
	if err := srv.Close(); err != nil {
		t.Fatal(err)
	}
	// Another one-node cluster, running, with node n2.
	raftB, apiB := loopbackAddr(t), loopbackAddr(t)
	b, err := tokenservice.Start(context.Background(), bound(t, tokenservice.Config{
		Config: raftstore.Config{
			ID:       "n2",
			DataDir:  filepath.Join(dir, "b"),
			RaftAddr: raftB,
			APIAddr:  apiB,
			Logger:   testutil.Logger(t),
			Peers:    []tokenapi.Peer{{ID: "n2", RaftAddr: raftB, APIAddr: apiB}},
		},
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Kill()
	testutil.WaitFor(t, 10*time.Second, "n2's cluster id", func() error {
		if b.LocalStatus().ClusterID == "" {
			return errors.New("not recorded yet")
		}
		return nil
	})
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	free1, free2, free3 := testutil.FreeAddr(t), testutil.FreeAddr(t), testutil.FreeAddr(t)
	// n1's own address next to cluster B's n2.
	otherPeers := fmt.Sprintf("n1=%s=http://%s,n2=%s=http://%s", raft1, api1, raftB, apiB)
	// A new node n3 listed next to cluster B's n2, which holds state.
	besideB := fmt.Sprintf("n2=%s=http://%s,n3=%s=http://%s", raftB, apiB, free1, free2)
	// n1 and a peer that never answers.
	silentPeer := fmt.Sprintf("n1=%s=http://%s,n9=%s=http://%s", free1, free2, free3, free3)

	cases := []struct {
		name string
		args []string
		code int
		want []string
	}{
		{"unknown flag", []string{"token", "serve", "--bogus"}, 2, []string{"-bogus"}},
		{"unknown subcommand", []string{"token", "mint"}, 2, []string{"serve, next, status, floor, init, members, snapshot, restore, certs or credential"}},
		{"missing id", []string{"token", "serve", "--data-dir", dir}, 2, []string{"--id"}},
		{"data dir of another cluster", []string{"token", "serve", "--id", "n1", "--data-dir", filepath.Join(dir, "n1"),
			"--raft-addr", raft1, "--api-addr", api1, "--peers", otherPeers}, 1, []string{"another", "peer n2", "holds cluster", "--data-dir"}},
		{"empty data dir, peers hold state", []string{"token", "serve", "--id", "n3", "--data-dir", filepath.Join(dir, "y"),
			"--raft-addr", free1, "--api-addr", free2, "--peers", besideB}, 1,
			[]string{"n2 holds the state of cluster", "members remove n3", "--join", "members add n3", "Replacing a node"}},
		{"founding timeout", []string{"token", "serve", "--id", "n1", "--data-dir", filepath.Join(dir, "z"),
			"--raft-addr", free1, "--api-addr", free2, "--peers", silentPeer, "--founding-timeout", "1s"}, 1,
			[]string{"n9 at http://" + free3 + " does not answer", "start every node", "--wait-for-founding"}},
		{"join without members", []string{"token", "serve", "--id", "n1", "--data-dir", filepath.Join(dir, "w"),
			"--raft-addr", free1, "--api-addr", free2, "--join", "http://" + free3, "--founding-timeout", "1s"}, 1,
			[]string{"joins only once a leader confirms", "--join"}},
		{"data dir of another node", []string{"token", "serve", "--id", "n2", "--data-dir", filepath.Join(dir, "n1"),
			"--raft-addr", free1, "--api-addr", free2}, 1, []string{"belongs to node", "--data-dir"}},
		{"api port in use", []string{"token", "serve", "--id", "n1", "--data-dir", filepath.Join(dir, "x"),
			"--raft-addr", free1, "--api-addr", busy.Addr().String()}, 1, []string{"already in use", "--api-addr"}},
		{"raft port in use", []string{"token", "serve", "--id", "n1", "--data-dir", filepath.Join(dir, "x"),
			"--raft-addr", busy.Addr().String(), "--api-addr", free2}, 1, []string{"already in use", "--raft-addr"}},
		{"peers not naming this node", []string{"token", "serve", "--id", "n9", "--data-dir", filepath.Join(dir, "x"),
			"--raft-addr", free1, "--api-addr", free2, "--peers", otherPeers}, 1, []string{"does not name this node", "--peers"}},
		{"malformed peers", []string{"token", "serve", "--id", "n1", "--data-dir", filepath.Join(dir, "x"),
			"--peers", "n1=127.0.0.1:1"}, 2, []string{"ID=RAFTADDR=APIADDR"}},
		{"empty resource", []string{"token", "next", "", "--servers", "http://" + api1}, 2, []string{"RESOURCE is empty"}},
		{"no resource", []string{"token", "next", "--servers", "http://" + api1}, 2, []string{"RESOURCE"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) { cliRefuses(t, tc.args, tc.code, tc.want...) })
	}
	// Nothing was written for the refused "x" data dir.
	if m, _ := filepath.Glob(filepath.Join(dir, "x", "*")); len(m) != 0 {
		t.Errorf("refused starts left files behind: %v", m)
	}
}

func TestHTTPBadRequests(t *testing.T) {
	t.Parallel()
	c := tokenservicetest.StartCluster(t, 3)
	for i, u := range c.APIURLs() {
		for _, body := range []string{`{"resource":""}`, `{"resource":"   "}`, `not json`, ``} {
			resp, err := http.Post(u+"/v1/tokens", "application/json", strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			var e struct{ Error, Code string }
			err = json.NewDecoder(resp.Body).Decode(&e)
			resp.Body.Close()
			if err != nil || resp.StatusCode != http.StatusBadRequest || e.Code != "bad_request" || e.Error == "" {
				t.Errorf("node %d: POST %q = %d %+v (%v); want 400 bad_request", i, body, resp.StatusCode, e, err)
			}
		}
	}
	if got := maxStatusToken(c); got != 0 {
		t.Fatalf("bad requests minted tokens: last token %d", got)
	}
	cl := c.Client(t)
	if _, err := cl.Next(context.Background(), ""); !errors.Is(err, tokenapi.ErrEmptyResource) || !errors.Is(err, tokenapi.ErrBadRequest) {
		t.Fatalf("Next(\"\") = %v, want tokenapi.ErrEmptyResource", err)
	}
}

// A node without quorum answers a clear retryable error at once, the CLI
// prints it on one line, and nothing is minted; with its peers back, tokens
// continue.
func TestNoQuorum(t *testing.T) {
	t.Parallel()
	c := tokenservicetest.StartCluster(t, 3)
	cl := c.Client(t)
	last := tokenservicetest.Mint(t, cl, 5)[4]
	leader := c.Leader(t)
	alone := (leader + 1) % 3
	for i := range 3 {
		if i != alone {
			c.Kill(i)
		}
	}
	testutil.WaitFor(t, 20*time.Second, "the lone node to lose its leader", func() error {
		if st := c.Node(alone).LocalStatus(); st.LeaderID != "" {
			return errors.New("still follows " + st.LeaderID)
		}
		return nil
	})
	frozen := c.Node(alone).LocalStatus().LastToken
	resp, err := http.Post(c.APIURL(alone)+"/v1/tokens", "application/json", strings.NewReader(`{"resource":"r"}`))
	if err != nil {
		t.Fatal(err)
	}
	var e struct{ Error, Code string }
	_ = json.NewDecoder(resp.Body).Decode(&e)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || e.Code != "no_quorum" {
		t.Fatalf("POST to a node without quorum = %d %+v; want 503 no_quorum", resp.StatusCode, e)
	}
	t.Logf("node without quorum answers: %s", e.Error)
	if r, err := http.Get(c.APIURL(alone) + "/readyz"); err != nil || r.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("readyz of a node without quorum = %v, %v; want 503", r, err)
	}
	if r, err := http.Get(c.APIURL(alone) + "/healthz"); err != nil || r.StatusCode != http.StatusOK {
		t.Fatalf("healthz = %v, %v; want 200", r, err)
	}

	code, stdout, stderr := runCLI(t, "token", "next", "orders/42", "--servers", c.APIURL(alone), "--timeout", "1s")
	if code != 1 || stdout != "" {
		t.Fatalf("token next without quorum: exit %d, stdout %q", code, stdout)
	}
	oneLine(t, stderr, "no quorum", c.APIURL(alone))

	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(300*time.Millisecond, cancel)
	_, err = c.ClientFor(t, []string{c.APIURL(alone)}).Next(ctx, "r")
	if !errors.Is(err, context.Canceled) || !(errors.Is(err, tokenapi.ErrNoQuorum) || errors.Is(err, tokenapi.ErrUnavailable)) {
		t.Fatalf("cancelled Next = %v; want context.Canceled and what the node answered", err)
	}
	// (On the read-index path the counter is the top of the last
	// reservation, above the last token handed out.)
	if got := c.Node(alone).LocalStatus().LastToken; got != frozen {
		t.Fatalf("lone node's last token moved to %d (was %d, last minted %d)", got, frozen, last)
	}

	for i := range 3 {
		if i != alone {
			c.Restart(i)
		}
	}
	c.Leader(t)
	if tok := tokenservicetest.Mint(t, cl, 1)[0]; tok <= last {
		t.Fatalf("token after quorum is back %d <= %d", tok, last)
	}
}

func TestCLINextAndStatus(t *testing.T) {
	t.Parallel()
	c := tokenservicetest.StartCluster(t, 3)
	servers := strings.Join(c.APIURLs(), ",")
	code, out, stderr := runCLI(t, "token", "next", "orders/42", "--servers", servers)
	if code != 0 || strings.TrimSpace(out) != "1" {
		t.Fatalf("token next = exit %d, stdout %q, stderr %s; want 1", code, out, stderr)
	}
	code, out, _ = runCLI(t, "token", "next", "orders/42", "--servers", strings.TrimPrefix(c.APIURL(2), "http://"))
	if code != 0 || strings.TrimSpace(out) != "2" {
		t.Fatalf("token next via HOST:PORT = exit %d, stdout %q; want 2", code, out)
	}
	// The first server may be a follower that has not yet applied the
	// reservation the tokens came from: its view catches up.
	testutil.WaitFor(t, 10*time.Second, "status --json to show the leader, 3 members and a token", func() error {
		code, out, stderr := runCLI(t, "token", "status", "--servers", servers, "--json")
		var st tokenapi.Status
		if err := json.Unmarshal([]byte(out), &st); code != 0 || err != nil {
			return fmt.Errorf("status --json = exit %d, %v; stdout %q stderr %s", code, err, out, stderr)
		}
		if st.LeaderID == "" || len(st.Members) != 3 || st.LastToken < 1 {
			return fmt.Errorf("status --json = %+v", st)
		}
		return nil
	})
	code, out, _ = runCLI(t, "token", "status", "--servers", servers)
	if code != 0 || !strings.Contains(out, "Leader") || strings.Count(out, "Follower") != 2 {
		t.Fatalf("status table = exit %d:\n%s", code, out)
	}
	t.Logf("status table:\n%s", out)
}
