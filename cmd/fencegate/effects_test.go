package main

import (
	"bytes"
	"context"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/internal/payprovider"
	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/fencegate/fencegate/pgfence/pgfencetest"
	"github.com/jackc/pgx/v5"
)

// effectsDB is a database with an application role and a relay role.
func effectsDB(t *testing.T) (db *pgfencetest.DB, admin *pgx.Conn, relayDSN string) {
	t.Helper()
	db = pgfencetest.New(t)
	admin = db.Admin(t)
	role := pgfencetest.Role(t, db.DSN, "fg_relay_", "LOGIN")
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"schema", "install", "--db", db.DSN, "--owner", db.Owner, "--relay", role}, &out, &errb); code != 0 {
		t.Fatalf("schema install --relay: %d %s %s", code, out.String(), errb.String())
	}
	if !strings.Contains(out.String(), "granted "+role+" USAGE on schema fencegate, EXECUTE on effect_claim") {
		t.Fatalf("schema install --relay said:\n%s", out.String())
	}
	return db, admin, pgfencetest.WithUser(t, db.DSN, role)
}

func commitEffect(t *testing.T, app *pgx.Conn, resource string, token int64, target, payload string) int64 {
	t.Helper()
	ctx := context.Background()
	tx, err := app.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	if _, err := tx.Exec(ctx, fencegate.FenceSQL, resource, token); err != nil {
		t.Fatal(err)
	}
	var id int64
	if err := tx.QueryRow(ctx, fencegate.EffectSQL, resource, target, payload).Scan(&id); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	return id
}

// relayCLI runs "fencegate relay" in this process until the returned stop
// is called (which cancels it as SIGTERM does and waits for the drain).
func relayCLI(t *testing.T, args ...string) (stop func() string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var out, errb bytes.Buffer
	var mu sync.Mutex
	done := make(chan int, 1)
	go func() {
		mu.Lock()
		defer mu.Unlock()
		done <- run(ctx, append([]string{"relay"}, args...), &out, &errb)
	}()
	var once sync.Once
	var log string
	stop = func() string {
		once.Do(func() {
			cancel()
			select {
			case code := <-done:
				mu.Lock()
				log = errb.String()
				mu.Unlock()
				if code != 0 {
					t.Errorf("relay exited %d: %s", code, log)
				}
			case <-time.After(30 * time.Second):
				t.Errorf("relay did not drain")
			}
		})
		return log
	}
	t.Cleanup(func() { stop() })
	return stop
}

func effectState(t *testing.T, admin *pgx.Conn, id int64) string {
	t.Helper()
	var s string
	if err := admin.QueryRow(context.Background(), "SELECT state FROM fencegate.effects WHERE id = $1", id).Scan(&s); err != nil {
		return "gone"
	}
	return s
}

// TestEffectsCommands: show lists a failed effect with the provider's
// answer and a pending one, retry re-queues the failed one (delivered by
// the relay once the provider accepts), drop settles the pending one with
// its reason, and a relay with --retain prunes what was settled.
func TestEffectsCommands(t *testing.T) {
	db, admin, relayDSN := effectsDB(t)
	app := db.AppConn(t)
	prov := payprovider.Start(payprovider.Faults{})
	defer prov.Close()
	reject := true
	var mu sync.Mutex
	prov.Reject = func([]byte) bool { mu.Lock(); defer mu.Unlock(); return reject }
	failed := commitEffect(t, app, "order:1", 1, "pay", `{"amount": 10}`)
	stuck := commitEffect(t, app, "order:2", 1, "ledger", `{"amount": 20}`)

	stop := relayCLI(t, "--db", relayDSN, "--target", "pay="+prov.URL(), "--poll", "20ms")
	testutil.Eventually(t, 20*time.Second, "the declined effect failed", func() bool { return effectState(t, admin, failed) == "failed" })
	stop()

	for _, c := range []struct {
		args []string
		code int
		out  []string
		err  string
	}{
		{[]string{"effects", "show", "--db", db.DSN}, 0, []string{"ID", "LAST ERROR", fmt.Sprintf("%d", failed), `"order:1"`, "failed", "HTTP 422", "card declined", `"order:2"`, "ledger", "pending"}, ""},
		{[]string{"effects", "show", "--db", db.DSN, "--state", "delivered"}, 0, []string{"no effects"}, ""},
		{[]string{"effects", "show", "--db", db.DSN, "--state", "nope"}, 2, nil, "use pending, failed"},
		{[]string{"effects", "show", "--db", db.AppDSN}, 1, nil, "permission denied"},
		{[]string{"effects", "retry", "--db", db.DSN}, 2, nil, "missing effect ID"},
		{[]string{"effects", "retry", "x", "--db", db.DSN}, 2, nil, "not an effect ID"},
		{[]string{"effects", "retry", "999999", "--db", db.DSN}, 1, nil, "no such effect"},
		{[]string{"effects", "drop", fmt.Sprint(stuck), "--db", db.DSN}, 2, nil, "needs --reason"},
		{[]string{"effects", "drop", fmt.Sprint(stuck), "--db", db.DSN, "--reason", "ledger retired"}, 0, []string{"dropped"}, ""},
		{[]string{"effects", "drop", fmt.Sprint(stuck), "--db", db.DSN, "--reason", "again"}, 1, nil, "is dropped; only pending and failed"},
		{[]string{"effects", "retry", fmt.Sprint(failed), "--db", db.DSN}, 0, []string{"re-queued"}, ""},
	} {
		var out, errb bytes.Buffer
		code := run(context.Background(), c.args, &out, &errb)
		if code != c.code {
			t.Fatalf("%q: exit %d, want %d\nstdout: %s\nstderr: %s", c.args, code, c.code, out.String(), errb.String())
		}
		for _, w := range c.out {
			if !strings.Contains(out.String(), w) {
				t.Fatalf("%q: stdout lacks %q:\n%s", c.args, w, out.String())
			}
		}
		if c.err != "" && !strings.Contains(errb.String(), c.err) {
			t.Fatalf("%q: stderr lacks %q:\n%s", c.args, c.err, errb.String())
		}
	}
	var lastErr string
	if err := admin.QueryRow(context.Background(), "SELECT last_error FROM fencegate.effects WHERE id = $1", stuck).Scan(&lastErr); err != nil || !strings.Contains(lastErr, "ledger retired") || !strings.Contains(lastErr, "dropped by postgres") {
		t.Fatalf("the dropped effect keeps %q, %v", lastErr, err)
	}
	var attempts int
	if err := admin.QueryRow(context.Background(), "SELECT attempts FROM fencegate.effects WHERE id = $1 AND state = 'pending'", failed).Scan(&attempts); err != nil || attempts != 0 {
		t.Fatalf("the re-queued effect: attempts %d, %v; want pending with 0 attempts", attempts, err)
	}
	mu.Lock()
	reject = false
	mu.Unlock()
	stop = relayCLI(t, "--db", relayDSN, "--target", "pay="+prov.URL(), "--poll", "20ms", "--retain", "1ms")
	testutil.Eventually(t, 20*time.Second, "the re-queued effect delivered and both settled effects pruned", func() bool {
		return effectState(t, admin, failed) == "gone" && effectState(t, admin, stuck) == "gone"
	})
	stop()
	if n := len(prov.Charges()); n != 1 {
		t.Fatalf("%d charges, want 1", n)
	}
}

// TestRelayTLS: an https target is reached with --ca-file, and without it
// the attempts fail verification and are retried, never delivered.
func TestRelayTLS(t *testing.T) {
	db, admin, relayDSN := effectsDB(t)
	app := db.AppConn(t)
	var hits int
	var mu sync.Mutex
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		hits++
		mu.Unlock()
		w.WriteHeader(http.StatusCreated)
	}))
	defer srv.Close()
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	id := commitEffect(t, app, "order:1", 1, "secure", `{}`)

	stop := relayCLI(t, "--db", relayDSN, "--target", "secure="+srv.URL, "--poll", "20ms", "--min-backoff", "10ms", "--max-backoff", "20ms")
	testutil.Eventually(t, 20*time.Second, "an attempt refused by certificate verification", func() bool {
		var attempts int
		var lastErr *string
		admin.QueryRow(context.Background(), "SELECT attempts, last_error FROM fencegate.effects WHERE id = $1", id).Scan(&attempts, &lastErr) //nolint:errcheck
		return attempts > 0 && lastErr != nil && strings.Contains(*lastErr, "certificate")
	})
	stop()
	if s := effectState(t, admin, id); s != "pending" {
		t.Fatalf("state %s without the CA, want pending", s)
	}
	stop = relayCLI(t, "--db", relayDSN, "--target", "secure="+srv.URL, "--ca-file", ca, "--poll", "20ms", "--min-backoff", "10ms", "--max-backoff", "20ms")
	testutil.Eventually(t, 20*time.Second, "delivered over TLS", func() bool { return effectState(t, admin, id) == "delivered" })
	stop()
	mu.Lock()
	defer mu.Unlock()
	if hits != 1 {
		t.Fatalf("%d requests reached the server, want 1", hits)
	}
}
