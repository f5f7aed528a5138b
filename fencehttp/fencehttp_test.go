package fencehttp_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/fencegate/fencegate/fencehttp"
	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/fencegate/fencegate/pgfence"
	"github.com/fencegate/fencegate/pgfence/pgfencetest"
	"github.com/fencegate/fencegate/relay"
	"github.com/jackc/pgx/v5"
)

func TestMain(m *testing.M) { testutil.Main(m) }

// connTx is a transaction on a connection of its own, closed when the
// transaction ends: a pool of one per request.
type connTx struct {
	pgx.Tx
	conn *pgx.Conn
}

func (c connTx) Commit(ctx context.Context) error {
	defer c.conn.Close(context.Background())
	return c.Tx.Commit(ctx)
}

func (c connTx) Rollback(ctx context.Context) error {
	err := c.Tx.Rollback(ctx)
	if err == nil {
		c.conn.Close(context.Background())
	}
	return err
}

// TestMiddleware: a stale token gets 409 and runs nothing; the current
// holder's request runs in the fenced transaction; a repeated
// Idempotency-Key gets the first answer and runs nothing, also when the two
// requests arrive at once; a 500 rolls back, key included.
func TestMiddleware(t *testing.T) {
	ctx := context.Background()
	db := pgfencetest.New(t)
	db.Exec(t, fencehttp.TableSQL)
	db.Exec(t, "CREATE TABLE charges (resource text NOT NULL, amount int NOT NULL, token bigint NOT NULL)")
	admin := db.Admin(t)
	for _, tbl := range []string{"fencegate_idempotency", "charges"} {
		if err := pgfence.Protect(ctx, admin, tbl, "resource"); err != nil {
			t.Fatal(err)
		}
		db.Exec(t, "GRANT SELECT, INSERT, UPDATE, DELETE ON "+tbl+" TO "+db.App)
	}
	var runs atomic.Int64
	fail := false
	var mu sync.Mutex
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		tx := fencehttp.Tx(r)
		res, _ := io.ReadAll(r.Body)
		if _, err := tx.Exec(r.Context(), "INSERT INTO charges VALUES ($1, $2, $3)", r.Header.Get("Fencing-Resource"), len(res), r.Header.Get("Fencing-Token")); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		mu.Lock()
		f := fail
		mu.Unlock()
		if f {
			http.Error(w, "provider down", http.StatusBadGateway)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"charge": %d}`, runs.Load())
	})
	mw := fencehttp.Middleware(fencehttp.Options{Begin: func(ctx context.Context) (pgx.Tx, error) {
		conn, err := pgx.Connect(ctx, db.AppDSN)
		if err != nil {
			return nil, err
		}
		tx, err := conn.Begin(ctx)
		if err != nil {
			conn.Close(ctx)
			return nil, err
		}
		return connTx{tx, conn}, nil
	}, Logger: testutil.Logger(t)})
	srv := httptest.NewServer(mw(handler))
	defer srv.Close()

	post := func(resource string, token int64, key string) (int, string, http.Header) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader(`{"amount": 10}`))
		if resource != "" {
			relay.SetHeaders(req.Header, key, resource, token)
		}
		if key == "" {
			req.Header.Del("Idempotency-Key")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), resp.Header
	}
	charges := func() int {
		var n int
		if err := admin.QueryRow(ctx, "SELECT count(*) FROM charges").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	if code, _, _ := post("", 0, ""); code != http.StatusBadRequest {
		t.Fatalf("no fencing headers: %d, want 400", code)
	}
	if code, body, _ := post("card:1", 5, "k1"); code != http.StatusCreated || body != `{"charge": 1}` {
		t.Fatalf("first request: %d %q", code, body)
	}
	code, body, h := post("card:1", 5, "k1")
	if code != http.StatusCreated || body != `{"charge": 1}` || h.Get("Idempotent-Replayed") != "true" || h.Get("Content-Type") != "application/json" {
		t.Fatalf("repeated key: %d %q %v", code, body, h)
	}
	if code, body, _ := post("card:1", 4, "k2"); code != http.StatusConflict || !strings.Contains(body, "stale token 4") {
		t.Fatalf("stale token: %d %q, want 409", code, body)
	}
	if code, _, _ := post("card:1", 4, "k1"); code != http.StatusConflict {
		t.Fatalf("stale token with a known key: %d, want 409 (the fence comes first)", code)
	}
	if runs.Load() != 1 || charges() != 1 {
		t.Fatalf("handler ran %d times, %d charges; want 1, 1", runs.Load(), charges())
	}
	mu.Lock()
	fail = true
	mu.Unlock()
	if code, _, _ := post("card:1", 6, "k3"); code != http.StatusBadGateway {
		t.Fatalf("failing handler: %d", code)
	}
	mu.Lock()
	fail = false
	mu.Unlock()
	if code, body, h := post("card:1", 6, "k3"); code != http.StatusCreated || h.Get("Idempotent-Replayed") != "" || body != `{"charge": 3}` {
		t.Fatalf("retry after a 502: %d %q %v, want a fresh run", code, body, h)
	}
	if charges() != 2 {
		t.Fatalf("%d charges, want 2 (the 502's rolled back)", charges())
	}
	// Duplicates at once: one runs, the other waits at the fence and
	// replays.
	var wg sync.WaitGroup
	bodies := make([]string, 8)
	for i := range bodies {
		wg.Add(1)
		go func() {
			defer wg.Done()
			code, body, _ := post("card:2", 1, "dup")
			bodies[i] = fmt.Sprint(code, body)
		}()
	}
	wg.Wait()
	for _, b := range bodies[1:] {
		if b != bodies[0] {
			t.Fatalf("duplicates got different answers: %q", bodies)
		}
	}
	if charges() != 3 {
		t.Fatalf("%d charges after 8 duplicates, want 3", charges())
	}
}
