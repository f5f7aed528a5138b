package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/fencegate/fencegate/pgfence/pgfencetest"
	"github.com/fencegate/fencegate/raftstore"
	"github.com/fencegate/fencegate/tokenservice"
	"github.com/fencegate/fencegate/tokenservice/tokenservicetest"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// fencegate proxy --prune-older-than D prunes, on its schedule, the marks
// of the database its admin connection names down to the floor a real
// token cluster gives for D: a holder whose token is that old is then
// refused (FG001) also straight to PostgreSQL, and a fresh token is
// accepted.
func TestProxyPrunesWithTheTokenServiceFloor(t *testing.T) {
	defer raftstore.SetCheckpointIntervalForTest(50 * time.Millisecond)()
	c := tokenservicetest.StartCluster(t, 3, tokenservicetest.WithConfig(func(_ int, cfg *tokenservice.Config) { cfg.ReserveSize = 2 }))
	cl := c.Client(t)
	db := pgfencetest.New(t)
	ctx := context.Background()
	fence := func(resource string, token int64) string {
		conn, err := pgx.Connect(ctx, db.AppDSN)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			var got int64
			return tx.QueryRow(ctx, fencegate.FenceSQL, resource, token).Scan(&got)
		})
		var pe *pgconn.PgError
		if errors.As(err, &pe) {
			return pe.Code
		}
		if err != nil {
			t.Fatal(err)
		}
		return ""
	}
	old, err := cl.NextToken(ctx, "order:1")
	if err != nil {
		t.Fatal(err)
	}
	if code := fence("order:1", old); code != "" {
		t.Fatalf("fence order:1 with %d: %s", old, code)
	}
	for range 6 { // entries that move the counter, and so checkpoints
		if _, err := cl.NextToken(ctx, "order:2"); err != nil {
			t.Fatal(err)
		}
		time.Sleep(80 * time.Millisecond)
	}
	pctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var stdout, stderr syncBuffer
	wg.Add(1)
	go func() {
		defer wg.Done()
		run(pctx, []string{"proxy", "--listen", "127.0.0.1:0", "--upstream", "postgres://127.0.0.1:5432?sslmode=disable",
			"--admin-upstream", db.DSN, "--prune-older-than", "300ms", "--prune-interval", "100ms",
			"--token-servers", strings.Join(c.APIURLs(), ",")}, &stdout, &stderr)
	}()
	defer func() { stop(); wg.Wait() }()
	testutil.WaitFor(t, 15*time.Second, "the proxy to prune order:1's mark", func() error {
		var n int
		if err := connectAdmin(t, db.DSN).QueryRow(ctx, "SELECT count(*) FROM fencegate.marks WHERE resource = 'order:1'").Scan(&n); err != nil {
			return err
		}
		if n != 0 {
			return fmt.Errorf("order:1 still has its mark; proxy log:\n%s", stderr.String())
		}
		return nil
	})
	if code := fence("order:1", old); code != fencegate.CodeStaleToken {
		t.Fatalf("the pruned holder's fence straight to PostgreSQL: %q, want FG001", code)
	}
	fresh, err := cl.NextToken(ctx, "order:1")
	if err != nil {
		t.Fatal(err)
	}
	if code := fence("order:1", fresh); code != "" {
		t.Fatalf("a fresh token %d after the prune: %s, want accepted", fresh, code)
	}
	if !strings.Contains(stderr.String(), "marks pruned") {
		t.Errorf("no log line of the prune:\n%s", stderr.String())
	}
}

// connectAdmin connects to dsn for the length of the test.
func connectAdmin(t *testing.T, dsn string) *pgx.Conn {
	t.Helper()
	c, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

// syncBuffer is a bytes.Buffer safe for one writer and readers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
