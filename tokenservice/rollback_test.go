package tokenservice_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/fencegate/fencegate/raftstore"
	"github.com/fencegate/fencegate/tokenapi"
	"github.com/fencegate/fencegate/tokenclient"
	"github.com/fencegate/fencegate/tokenservice"
	"github.com/fencegate/fencegate/tokenservice/tokenservicetest"
)

// A node put back from an older copy of its data, with real processes.
// n2's data directory is copied early (the process killed first, as a VM
// snapshot or a backup of a stopped node would take it); all three nodes
// then hand out more tokens; n3 stops (it lags from here); n1 and n2 hand
// out tokens up to about 2000. n2 stops and is put back from the copy (its
// whole data directory, or raft.db alone), n1, the only other node
// holding the newest entries, dies, and n3 and n2 start again. Before, the
// two elected a leader from their old logs and handed out tokens below
// those handed out already. Now n2 refuses to start, in one line saying it
// was put back from an older copy and how to replace it (started before
// n3, it waits for a peer to answer rather than start Raft blind); n3
// alone hands out nothing; once n1 is back, tokens continue above every
// one before.
func TestProcessRolledBackNodeRefused(t *testing.T) {
	for _, whole := range []bool{true, false} {
		name := "raft.db alone"
		if whole {
			name = "whole data dir"
		}
		t.Run(name, func(t *testing.T) { testRolledBack(t, whole) })
	}
}

func testRolledBack(t *testing.T, whole bool) {
	var peers, urls []string
	raft, api := make([]string, 3), make([]string, 3)
	for i := range 3 {
		raft[i], api[i] = testutil.FreeAddr(t), testutil.FreeAddr(t)
		peers = append(peers, fmt.Sprintf("n%d=%s=http://%s", i+1, raft[i], api[i]))
		urls = append(urls, "http://"+api[i])
	}
	root := t.TempDir()
	dirs := make([]string, 3)
	var procs []*proc
	for i := range 3 {
		dirs[i] = filepath.Join(root, fmt.Sprintf("n%d", i+1))
		procs = append(procs, &proc{t: t, name: fmt.Sprintf("n%d", i+1), args: []string{
			"token", "serve", "--id", fmt.Sprintf("n%d", i+1), "--data-dir", dirs[i],
			"--raft-addr", raft[i], "--api-addr", api[i], "--peers", strings.Join(peers, ","),
			"--heartbeat-timeout", "200ms", "--election-timeout", "200ms", "--leader-lease-timeout", "150ms",
			// A log entry every 64 tokens: the copy is many entries behind.
			"--reserve-size", "64",
		}})
	}
	startAll(t, procs)
	client := func(nodes ...int) *tokenclient.Client {
		var us []string
		for _, i := range nodes {
			us = append(us, urls[i])
		}
		cl, err := tokenclient.NewClient(us, tokenclient.WithMaxWait(30*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cl.Close() })
		return cl
	}
	all := client(0, 1, 2)
	tokenservicetest.Mint(t, all, 300)

	// The early copy of n2's data directory.
	copied := nodeState(t, urls[1]).LastIndex
	procs[1].kill()
	backup := filepath.Join(root, "n2-copy")
	copyDir(t, dirs[1], backup)
	procs[1].start()
	t.Logf("copied n2's data dir at last index %d", copied)

	// More tokens while all three run, until n3 has seen n2 hold more
	// than the copy does.
	toks := tokenservicetest.Mint(t, all, 700)
	testutil.Eventually(t, 30*time.Second, "n3 to see n2 hold more than the copy", func() bool {
		return nodeState(t, urls[2]).Held["n2"].CommitIndex > copied
	})
	procs[2].kill()

	// n1 and n2 alone hand out tokens up to about 2000.
	toks = append(toks, tokenservicetest.Mint(t, client(0, 1), 1000)...)
	highest := toks[len(toks)-1]
	t.Logf("n3 stopped; n1 and n2 handed out tokens up to %d", highest)

	procs[1].kill()
	if whole {
		if err := os.RemoveAll(dirs[1]); err != nil {
			t.Fatal(err)
		}
		copyDir(t, backup, dirs[1])
	} else {
		copyFile(t, filepath.Join(backup, "raft.db"), filepath.Join(dirs[1], "raft.db"))
	}
	procs[0].kill()

	var n2, n3 <-chan string
	if whole {
		n3, n2 = procs[2].launch(), procs[1].launch()
	} else {
		// n2 first, while no peer answers: it waits, and does not start
		// Raft blind; then n3 comes back.
		n2 = procs[1].launch()
		testutil.Eventually(t, 30*time.Second, "n2 to wait for its peers", func() bool {
			return len(n2) > 0 || strings.Contains(readyz(urls[1]), "needed to check that this data directory")
		})
		t.Logf("n2 waits: %s", readyz(urls[1]))
		n3 = procs[2].launch()
	}
	select {
	case line, ok := <-n2:
		if ok {
			// What the node did before: with the lagging n3 it makes a
			// majority from their old logs.
			lone := client(1, 2)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			tok, err := lone.NextToken(ctx, "orders/42")
			cancel()
			if err == nil && tok <= highest {
				t.Fatalf("n2, put back from a copy, and the lagging n3 handed out token %d after %d had been handed out", tok, highest)
			}
			t.Fatalf("n2 serves from an older copy of its data (%s); then handed out %d, %v (highest before %d)", line, tok, err, highest)
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("n2 neither served nor exited within 60s:\n%s", procs[1].tail())
	}
	_ = procs[1].cmd.Wait()
	procs[1].cmd = nil
	var refusal []string
	for _, l := range strings.Split(procs[1].tail(), "\n") {
		if strings.Contains(l, "older copy") {
			refusal = append(refusal, l)
		}
	}
	if len(refusal) != 1 {
		t.Fatalf("n2's output names the older copy on %d lines, want 1:\n%s", len(refusal), procs[1].tail())
	}
	for _, want := range []string{"n3 saw node n2", "put back from an older copy", "fencegate token members remove n2", "--join", "Replacing a node"} {
		if !strings.Contains(refusal[0], want) {
			t.Errorf("n2's refusal does not say %q:\n%s", want, refusal[0])
		}
	}
	t.Logf("n2 refuses to start: %s", refusal[0])

	// n3 alone hands out nothing.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	tok, err := client(2).NextToken(ctx, "orders/42")
	cancel()
	if err == nil {
		t.Fatalf("the lagging n3 alone handed out token %d (highest before %d)", tok, highest)
	}

	// n1 is back: with n3 a majority holding every entry.
	procs[0].start()
	procs[2].wait(n3)
	next := tokenservicetest.Mint(t, client(0, 2), 5)
	if next[0] <= highest {
		t.Fatalf("first token after n2's rollback %d <= %d handed out before it", next[0], highest)
	}
	t.Logf("n1 and n3 hand out %d..%d", next[0], next[len(next)-1])
}

// readyz returns the body of a node's /readyz, "" when it does not answer.
func readyz(url string) string {
	resp, err := http.Get(url + "/readyz")
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// heldState is the part of a node's GET /v1/internal/state this test reads.
type heldState struct {
	LastIndex uint64 `json:"last_index"`
	Held      map[string]struct {
		CommitIndex uint64 `json:"commit_index"`
	} `json:"held"`
}

func nodeState(t *testing.T, url string) heldState {
	t.Helper()
	resp, err := http.Get(url + "/v1/internal/state")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("state of %s: %d %s %v", url, resp.StatusCode, b, err)
	}
	var st heldState
	if err := json.Unmarshal(b, &st); err != nil {
		t.Fatal(err)
	}
	return st
}

func copyDir(t *testing.T, from, to string) {
	t.Helper()
	err := filepath.Walk(from, func(path string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(from, path)
		dst := filepath.Join(to, rel)
		if info.IsDir() {
			return os.MkdirAll(dst, info.Mode().Perm())
		}
		copyFile(t, path, dst)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// The same over mutual TLS, with every peer up: n2 is put back from a copy
// while the leader, which saw it hold more, runs. Its peers' records,
// taken over mutual TLS from n2's own certificate, refuse it before Raft
// starts; the replacement procedure brings it back, and the replaced node,
// a new data directory, is not refused for what the old one held.
func TestRolledBackRefusedOverMutualTLS(t *testing.T) {
	ca := newCA(t, "cluster")
	creds, _ := credentials(t, map[string][]tokenapi.Role{"app": {tokenapi.RoleClient}})
	dirs, rec := dataDirs(3)
	c := tokenservicetest.StartCluster(t, 3, rec, tokenservicetest.WithCA(ca, creds),
		tokenservicetest.WithConfig(func(_ int, cfg *tokenservice.Config) { cfg.ReserveSize = 4 }))
	cl := c.Client(t, tokenservicetest.ClientTLS(t, ca, "app", tokenapi.RoleClient)...)
	tokenservicetest.Mint(t, cl, 20)

	victim := (c.Leader(t) + 1) % 3
	copied := c.Node(victim).Store().Status().LastIndex
	c.Kill(victim)
	backup := filepath.Join(t.TempDir(), "copy")
	copyDir(t, dirs[victim], backup)
	c.Restart(victim)
	toks := tokenservicetest.Mint(t, cl, 100)
	highest := toks[len(toks)-1]
	testutil.WaitFor(t, 30*time.Second, "every peer to see "+c.ID(victim)+" hold more than the copy", func() error {
		for i := range 3 {
			if i == victim {
				continue
			}
			if h := c.Node(i).Store().State().Held[c.ID(victim)]; h.CommitIndex <= copied {
				return fmt.Errorf("%s saw %s at %+v, the copy holds index %d", c.ID(i), c.ID(victim), h, copied)
			}
		}
		return nil
	})

	c.Kill(victim)
	if err := os.RemoveAll(dirs[victim]); err != nil {
		t.Fatal(err)
	}
	copyDir(t, backup, dirs[victim])
	err := c.StartErr(victim)
	if err == nil {
		t.Fatalf("%s started from an older copy of its data directory", c.ID(victim))
	}
	if !errors.Is(err, raftstore.ErrRolledBack) || !errors.Is(err, raftstore.ErrDataDirLost) || strings.Contains(err.Error(), "\n") {
		t.Fatalf("%s from an older copy: Start = %v; want one line, ErrRolledBack and ErrDataDirLost", c.ID(victim), err)
	}
	t.Logf("%s refuses to start: %v", c.ID(victim), err)

	c.Replace(t, victim)
	c.Restart(victim) // its new directory resumes, whatever its peers still hold of the old one
	c.Leader(t)
	if got := tokenservicetest.Mint(t, cl, 3); got[0] <= highest {
		t.Fatalf("token after the replacement %d <= %d handed out before it", got[0], highest)
	}
}
