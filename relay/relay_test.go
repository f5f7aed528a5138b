package relay_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/internal/payprovider"
	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/fencegate/fencegate/pgfence"
	"github.com/fencegate/fencegate/pgfence/pgfencetest"
	"github.com/fencegate/fencegate/relay"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
)

func TestMain(m *testing.M) { testutil.Main(m) }

// stack is a database with a relay role, its DSN, and a superuser conn.
type stack struct {
	db       *pgfencetest.DB
	admin    *pgx.Conn
	relayDSN string
}

func newStack(t *testing.T) *stack {
	t.Helper()
	db := pgfencetest.New(t)
	admin := db.Admin(t)
	role := pgfencetest.Role(t, db.DSN, "fg_relay_", "LOGIN")
	if _, err := pgfence.Install(context.Background(), admin, pgfence.InstallOptions{OwnerRole: db.Owner, Relay: []string{role}}); err != nil {
		t.Fatal(err)
	}
	return &stack{db: db, admin: admin, relayDSN: pgfencetest.WithUser(t, db.DSN, role)}
}

// record commits, as the application role, one fenced transaction on
// resource with token that records an effect for target with payload.
func record(t testing.TB, conn *pgx.Conn, resource string, token int64, target string, payload any) int64 {
	t.Helper()
	ctx := context.Background()
	b, _ := json.Marshal(payload)
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	if _, err := tx.Exec(ctx, fencegate.FenceSQL, resource, token); err != nil {
		t.Fatal(err)
	}
	var id int64
	if err := tx.QueryRow(ctx, fencegate.EffectSQL, resource, target, string(b)).Scan(&id); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	return id
}

func states(t testing.TB, admin *pgx.Conn) map[string]int {
	t.Helper()
	rows, err := admin.Query(context.Background(), "SELECT state, count(*) FROM fencegate.effects GROUP BY state")
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]int{}
	for rows.Next() {
		var s string
		var n int
		if err := rows.Scan(&s, &n); err != nil {
			t.Fatal(err)
		}
		m[s] = n
	}
	return m
}

func startRelay(t *testing.T, cfg relay.Config) (stop func()) {
	t.Helper()
	r, err := relay.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx, nil) }()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("relay: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Errorf("relay did not drain")
		}
	}
	t.Cleanup(stop)
	return stop
}

// TestRelayDelivers: committed effects reach the provider with their
// headers, in commit order per resource; a 503 is retried, a 422 fails the
// effect and keeps the answer, an effect of an unknown target stays
// pending, and a rolled-back one is never sent.
func TestRelayDelivers(t *testing.T) {
	ctx := context.Background()
	s := newStack(t)
	app := s.db.AppConn(t)
	prov := payprovider.Start(payprovider.Faults{Unavailable: 0.3})
	defer prov.Close()
	prov.Reject = func(b []byte) bool { return strings.Contains(string(b), "declined") }

	want := map[string][]int{}
	for i := range 30 {
		r := fmt.Sprintf("order:%d", i%3)
		record(t, app, r, int64(i+1), "pay", map[string]any{"resource": r, "seq": i})
		want[r] = append(want[r], i)
	}
	declined := record(t, app, "order:9", 1, "pay", map[string]any{"card": "declined"})
	record(t, app, "order:8", 1, "elsewhere", map[string]any{"x": 1})
	// A rolled-back effect.
	tx, err := app.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, fencegate.FenceSQL, "order:0", int64(100)); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, fencegate.EffectSQL, "order:0", "pay", `{"resource": "order:0", "seq": -1}`); err != nil {
		t.Fatal(err)
	}
	tx.Rollback(ctx) //nolint:errcheck

	stop := startRelay(t, relay.Config{DSN: s.relayDSN, Targets: []relay.Target{{Name: "pay", URL: prov.URL(), Timeout: 5 * time.Second, Concurrency: 4}},
		Poll: 50 * time.Millisecond, MinBackoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond, Logger: testutil.Logger(t)})
	testutil.Eventually(t, 30*time.Second, "every effect of pay settled", func() bool {
		st := states(t, s.admin)
		return st["delivered"] == 30 && st["failed"] == 1
	})
	stop()

	// Headers: key, resource and token as stored.
	keys := map[string][2]any{}
	rows, err := s.admin.Query(ctx, "SELECT idem_key::text, resource, token FROM fencegate.effects")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var k, r string
		var tok int64
		if err := rows.Scan(&k, &r, &tok); err != nil {
			t.Fatal(err)
		}
		keys[k] = [2]any{r, tok}
	}
	got := map[string][]int{}
	for _, c := range prov.Charges() {
		k, ok := keys[c.Key]
		if !ok || k[0] != c.Resource || k[1] != c.Token {
			t.Fatalf("charge %+v: headers do not match the effect %v", c, k)
		}
		var body struct {
			Resource string
			Seq      int
		}
		if err := json.Unmarshal(c.Body, &body); err != nil {
			t.Fatal(err)
		}
		if body.Seq < 0 {
			t.Fatalf("a rolled-back effect was delivered: %s", c.Body)
		}
		got[body.Resource] = append(got[body.Resource], body.Seq)
	}
	for r, seqs := range want {
		if fmt.Sprint(got[r]) != fmt.Sprint(seqs) {
			t.Errorf("%s charged in order %v, committed %v", r, got[r], seqs)
		}
	}
	var status int
	var response, lastErr string
	if err := s.admin.QueryRow(ctx, "SELECT status, response, last_error FROM fencegate.effects WHERE id = $1 AND state = 'failed'", declined).Scan(&status, &response, &lastErr); err != nil {
		t.Fatal(err)
	}
	if status != 422 || !strings.Contains(response, "card declined") {
		t.Fatalf("declined effect: %d %q %q", status, response, lastErr)
	}
	if st := states(t, s.admin); st["pending"] != 1 {
		t.Fatalf("states %v: the effect of the unknown target should stay pending", st)
	}
	if _, _, overlaps := prov.Stats(); overlaps != 0 {
		t.Fatalf("%d requests overlapped another of their key", overlaps)
	}
}

// TestRelaysShare: several relays on one database never send one effect at
// once, and together keep each resource's order.
func TestRelaysShare(t *testing.T) {
	s := newStack(t)
	app := s.db.AppConn(t)
	prov := payprovider.Start(payprovider.Faults{})
	defer prov.Close()
	const n = 60
	for i := range n {
		r := fmt.Sprintf("acct:%d", i%4)
		record(t, app, r, int64(i+1), "pay", map[string]any{"resource": r, "seq": i})
	}
	for range 3 {
		startRelay(t, relay.Config{DSN: s.relayDSN, Targets: []relay.Target{{Name: "pay", URL: prov.URL(), Concurrency: 2}},
			Poll: 20 * time.Millisecond, Logger: testutil.Logger(t)})
	}
	testutil.Eventually(t, 30*time.Second, "every effect delivered", func() bool { return states(t, s.admin)["delivered"] == n })
	reqs, repeats, overlaps := prov.Stats()
	if reqs != n || repeats != 0 || overlaps != 0 {
		t.Fatalf("requests %d (want %d), repeats %d, overlaps %d: an effect was sent twice", reqs, n, repeats, overlaps)
	}
	last := map[string]int{}
	for _, c := range prov.Charges() {
		var body struct {
			Resource string
			Seq      int
		}
		json.Unmarshal(c.Body, &body) //nolint:errcheck
		if prev, ok := last[body.Resource]; ok && prev > body.Seq {
			t.Fatalf("%s: %d charged after %d", body.Resource, body.Seq, prev)
		}
		last[body.Resource] = body.Seq
	}
}

// TestRelayMetrics: /metrics counts what the relay did and what waits in
// the database; /healthz answers 200 once the database was reached.
func TestRelayMetrics(t *testing.T) {
	s := newStack(t)
	app := s.db.AppConn(t)
	prov := payprovider.Start(payprovider.Faults{})
	defer prov.Close()
	prov.Reject = func(b []byte) bool { return strings.Contains(string(b), "declined") }
	record(t, app, "order:1", 1, "pay", map[string]any{"amount": 1})
	record(t, app, "order:2", 1, "pay", map[string]any{"card": "declined"})
	record(t, app, "order:3", 1, "elsewhere", map[string]any{"amount": 3})
	reg := prometheus.NewRegistry()
	r, err := relay.New(relay.Config{DSN: s.relayDSN, Targets: []relay.Target{{Name: "pay", URL: prov.URL()}}, Poll: 20 * time.Millisecond,
		Logger: testutil.Logger(t), Metrics: relay.NewMetrics(reg)})
	if err != nil {
		t.Fatal(err)
	}
	h := r.Handler(reg)
	get := func(path string) (int, string) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		return rec.Code, rec.Body.String()
	}
	if code, _ := get("/healthz"); code != http.StatusServiceUnavailable {
		t.Fatalf("/healthz before the relay ran: %d, want 503", code)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { r.Run(ctx, nil); close(done) }() //nolint:errcheck
	defer func() { cancel(); <-done }()
	want := []string{`fencegate_relay_delivered_total{target="pay"} 1`, `fencegate_relay_failed_total{target="pay"} 1`,
		"fencegate_relay_pending 1", "fencegate_relay_failed 1", "fencegate_relay_delivery_seconds_count"}
	testutil.Eventually(t, 20*time.Second, "the metrics to show one delivered, one failed, one pending", func() bool {
		_, body := get("/metrics")
		for _, w := range want {
			if !strings.Contains(body, w) {
				return false
			}
		}
		return !strings.Contains(body, "fencegate_relay_oldest_pending_seconds 0\n")
	})
	if code, _ := get("/healthz"); code != http.StatusOK {
		t.Fatalf("/healthz while running: %d, want 200", code)
	}
}
