package faults

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/proc"
	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/fencegate/fencegate/tokenclient"
)

func TestMain(m *testing.M) { testutil.Main(m) }

// startTokenStack starts only the token nodes of a stack, with their relays.
func startTokenStack(t *testing.T) *Stack {
	t.Helper()
	dir := t.TempDir()
	sup, err := proc.New(filepath.Join(dir, "logs"), testutil.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	s := &Stack{cfg: StackConfig{Binary: testutil.Binary(t), Dir: dir, Logger: testutil.Logger(t)}, log: testutil.Logger(t), Sup: sup}
	t.Cleanup(func() { s.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := s.startTokens(ctx); err != nil {
		t.Fatal(err)
	}
	return s
}

// TestPartitionIsolatesLeader shows that the relays really carry the Raft
// traffic: cutting the leader's links makes the other two elect a new
// leader, and tokens keep increasing across the change.
func TestPartitionIsolatesLeader(t *testing.T) {
	s := startTokenStack(t)
	ctx := context.Background()
	old, err := s.WaitLeader(ctx, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	c, err := tokenclient.NewClient(s.TokenURLs())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	before, err := c.NextToken(ctx, "r")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range s.Tokens {
		if p != old {
			cut(old, p, true)
		}
	}
	testutil.WaitFor(t, 30*time.Second, "a new leader among the majority", func() error {
		errs := []error{errors.New("no new leader yet")}
		for _, p := range s.Tokens {
			if p == old {
				continue
			}
			st, err := s.status(ctx, p)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", p.ID, err))
				continue
			}
			if st.LeaderID != "" && st.LeaderID != old.ID && st.ID == st.LeaderID {
				return nil
			}
		}
		return errors.Join(errs...)
	})
	after, err := c.NextToken(ctx, "r")
	if err != nil {
		t.Fatal(err)
	}
	if after <= before {
		t.Fatalf("token after the partition = %d, want > %d", after, before)
	}
	for _, p := range s.Tokens {
		if p != old {
			cut(old, p, false)
		}
	}
}

// TestTokenNodeExitingAtStartFails shows that a stack does not go on with a
// node that died as it started (its port taken, say): the start fails at
// once and says why, instead of running with two nodes.
func TestTokenNodeExitingAtStartFails(t *testing.T) {
	sup, err := proc.New(t.TempDir(), testutil.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	s := &Stack{log: testutil.Logger(t), Sup: sup}
	t.Cleanup(func() { s.Close() })
	// n1 answers /v1/status like a node; n2 exits as a node does when its
	// port is taken.
	srv := testutil.Serve(t, func(c net.Conn) {
		defer c.Close()
		bufio.NewReader(c).ReadString('\n')
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n{\"id\":\"n1\"}")
	})
	ok := &TokenNode{ID: "n1", APIAddr: srv}
	ok.Proc = sup.Add("token-n1", "sleep", []string{"60"})
	bad := &TokenNode{ID: "n2", APIAddr: testutil.FreeAddr(t)}
	bad.Proc = sup.Add("token-n2", "sh", []string{"-c", "echo 'listen api on 127.0.0.1:1: address already in use' >&2; exit 1"})
	for _, n := range []*TokenNode{ok, bad} {
		if err := n.Proc.Start(); err != nil {
			t.Fatal(err)
		}
	}
	s.Tokens = []*TokenNode{ok, bad}
	<-bad.Proc.Exited()
	// Without the check, this would wait out the timeout and blame a
	// refused connection.
	err = s.waitTokensUp(context.Background(), 20*time.Second)
	if !errors.Is(err, proc.ErrExited) || !strings.Contains(err.Error(), "token node n2") || !strings.Contains(err.Error(), "address already in use") {
		t.Fatalf("waitTokensUp = %v; want n2's exit and its log", err)
	}
}
