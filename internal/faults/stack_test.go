package faults

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/fencegate/fencegate/tokenservice"
)

func TestMain(m *testing.M) { testutil.Main(m) }

// startTokenStack starts only the token nodes of a stack, with their relays.
func startTokenStack(t *testing.T) *Stack {
	t.Helper()
	dir := t.TempDir()
	sup, err := NewSupervisor(filepath.Join(dir, "logs"), testutil.Logger(t))
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
	c, err := tokenservice.NewClient(s.TokenURLs())
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
		for _, p := range s.Tokens {
			if p == old {
				continue
			}
			st, err := s.status(ctx, p)
			if err != nil {
				return err
			}
			if st.LeaderID != "" && st.LeaderID != old.ID && st.ID == st.LeaderID {
				return nil
			}
		}
		return fmt.Errorf("no new leader yet")
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
