package lostupdates

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/cmd/internal/devstack"
	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/fencegate/fencegate/pgfence/pgfencetest"
)

func TestMain(m *testing.M) {
	WorkerMain() // a worker process of a test run exits here
	testutil.Main(m)
}

// A few seconds of each mode. The verdicts come from the counter and the
// increments log read back from PostgreSQL and from the SQLSTATEs the workers
// got, not from the printed report.
func TestShortRun(t *testing.T) {
	addr, _ := testutil.Redis(t)
	st, err := devstack.StartThrowaway(context.Background(), devstack.ThrowawayConfig{
		Prefix: "fg_dev_", Postgres: testutil.PostgresAdminDSN(), Redis: addr, Logger: testutil.Logger(t)})
	if err != nil {
		t.Fatalf("start the stack: %v", err)
	}
	t.Cleanup(func() {
		if err := st.Close(); err != nil {
			t.Errorf("stop the stack: %v", err)
		}
	})
	cfg := DefaultConfig()
	cfg.Workers = 4
	cfg.TTL = 100 * time.Millisecond
	cfg.Duration = 2500 * time.Millisecond
	cfg.ChaosEvery = 400 * time.Millisecond
	cfg.Seed = 5
	cfg.Postgres = testutil.PostgresAdminDSN()
	cfg.Owner = pgfencetest.Role(t, cfg.Postgres, "fg_owner_", "NOLOGIN")
	cfg.Proxy = st.ProxyAddr
	cfg.Redis = addr
	cfg.Tokens = strings.Join(st.Tokens.URLs, ",")
	cfg.Chart = filepath.Join(t.TempDir(), "chart.svg")
	if err := cfg.Check(); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	rep, err := Run(context.Background(), cfg, &out)
	t.Log(out.String())
	if err != nil {
		t.Fatal(err)
	}
	d, p := rep.mode(false), rep.mode(true)
	if d == nil || p == nil {
		t.Fatalf("modes %+v; want direct and proxy", rep.modes)
	}
	for _, m := range []*modeReport{d, p} {
		if m.Acked == 0 || m.Pauses == 0 {
			t.Errorf("fenced=%v: %d increments, %d pauses; the run did nothing", m.Fenced, m.Acked, m.Pauses)
		}
		if m.Logged != int64(m.Acked) {
			t.Errorf("fenced=%v: %d rows logged, %d acknowledged", m.Fenced, m.Logged, m.Acked)
		}
		if m.Final > int64(m.Acked) {
			t.Errorf("fenced=%v: counter %d above the %d acknowledged increments", m.Fenced, m.Final, m.Acked)
		}
		if m.OtherErrors != 0 {
			t.Errorf("fenced=%v: %d writes failed with an unexpected SQLSTATE", m.Fenced, m.OtherErrors)
		}
	}
	if got, want := p.Final, int64(p.Acked); got != want {
		t.Errorf("through the proxy: counter %d, want %d (the accepted increments)", got, want)
	}
	if p.Lost != 0 || p.StaleAccepted != 0 || p.Traced != 0 {
		t.Errorf("through the proxy: lost %d, stale landed %d, traces of rejected %d; want 0, 0, 0", p.Lost, p.StaleAccepted, p.Traced)
	}
	if d.Rejected != 0 {
		t.Errorf("direct: %d FG001 rejections without a proxy", d.Rejected)
	}
	if p.Attempts != p.Acked+p.Rejected {
		t.Errorf("through the proxy: %d attempts = %d accepted + %d rejected does not add up", p.Attempts, p.Acked, p.Rejected)
	}
	if !rep.ProxySafe() {
		t.Error("ProxySafe() = false")
	}
	if fi, err := os.Stat(cfg.Chart); err != nil || fi.Size() == 0 {
		t.Errorf("chart %s: %v", cfg.Chart, err)
	}
}
