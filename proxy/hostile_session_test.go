package proxy_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/proxy"
	"github.com/fencegate/fencegate/proxy/proxytest"
	"github.com/jackc/pgx/v5"
)

// withOptions returns dsn with the startup options opts
// ("-c name=value ...").
func withOptions(t testing.TB, dsn, opts string) string {
	t.Helper()
	u := mustURL(t, dsn)
	q := u.Query()
	q.Set("options", opts)
	u.RawQuery = strings.ReplaceAll(q.Encode(), "+", "%20") // pgx reads + as itself
	return u.String()
}

// outputSettings are settings a client may choose that change what
// PostgreSQL prints: names, constants, numbers, dates, strings.
var outputSettings = []string{
	"-c quote_all_identifiers=on",
	"-c DateStyle=SQL,DMY",
	"-c IntervalStyle=sql_standard",
	"-c TimeZone=Pacific/Chatham",
	"-c extra_float_digits=-15",
	"-c bytea_output=escape",
	"-c standard_conforming_strings=off",
	"-c lc_numeric=C -c lc_time=C -c lc_monetary=C",
	"-c xmloption=document -c xmlbinary=hex",
	"-c search_path=public",
	"-c quote_all_identifiers=on -c DateStyle=German -c standard_conforming_strings=off -c extra_float_digits=3",
}

// TestGatePinsTheClientsOutputSettings: a session's own settings do not
// change the gate's verdict. The schema check compares definitions as
// PostgreSQL prints them; with quote_all_identifiers=on chosen at startup
// it used to find about 80 problems in a sound schema and refuse the
// session (and, with an admin connection, repair the schema for it).
// Every such session is admitted, and is told its own settings.
func TestGatePinsTheClientsOutputSettings(t *testing.T) {
	fx := newFixture(t, everySession)
	for _, opts := range outputSettings {
		t.Run(opts, func(t *testing.T) {
			c := connect(t, withOptions(t, fx.proxied, opts))
			var qai string
			if err := c.QueryRow(context.Background(), "SHOW quote_all_identifiers").Scan(&qai); err != nil {
				t.Fatal(err)
			}
			if want := map[bool]string{true: "on", false: "off"}[strings.Contains(opts, "quote_all_identifiers=on")]; qai != want {
				t.Errorf("the session's quote_all_identifiers after the gate: %s, want %s", qai, want)
			}
			// What the client was told is its session's own, not the
			// gate's pins: a driver escapes strings by it.
			for _, p := range []string{"standard_conforming_strings", "DateStyle", "IntervalStyle"} {
				var shown string
				if err := c.QueryRow(context.Background(), "SHOW "+p).Scan(&shown); err != nil {
					t.Fatal(err)
				}
				if told := c.PgConn().ParameterStatus(p); told != shown {
					t.Errorf("%s: the client was told %q, the session has %q", p, told, shown)
				}
			}
			if strings.Contains(opts, "standard_conforming_strings=off") && c.PgConn().ParameterStatus("standard_conforming_strings") != "off" {
				t.Errorf("standard_conforming_strings the client was told: %q, want off", c.PgConn().ParameterStatus("standard_conforming_strings"))
			}
		})
	}
	// The same through the role's defaults.
	execAdmin(t, fx.admin, "ALTER ROLE "+fx.role+" SET quote_all_identifiers = on")
	t.Cleanup(func() { execAdmin(t, fx.admin, "ALTER ROLE "+fx.role+" RESET quote_all_identifiers") })
	admitted(t, fx.proxied)
}

// TestHostileSessionsCostOnlyThemselves: with an admin connection, a
// session whose check finds problems the admin connection's own check
// does not find is refused, and nothing else happens: no repair, no lock
// queued on the marks, one admin check per RepairInterval however many
// sessions ask; its hint says that nothing was repaired. The gate's pins
// are cut back here to the search_path alone (the gate before it pinned
// the other settings) so that quote_all_identifiers reaches the check, as
// any setting the gate might fail to pin would.
func TestHostileSessionsCostOnlyThemselves(t *testing.T) {
	defer proxy.SetGatePins("SET LOCAL search_path = pg_catalog, pg_temp")()
	fx := newFixture(t)
	var logs logBuffer
	proxied, p := proxytest.StartProxy(t, fx.direct, withAdmin(fx.admin, fx.db.Owner, &logs),
		proxytest.WithConfig(func(c *proxy.Config) { c.RepairInterval = time.Hour }))
	admitted(t, proxied)
	ctx := context.Background()

	// An unrelated holder keeps a fence (ROW EXCLUSIVE on the marks) open:
	// a repair would queue behind it, and every fence behind the repair.
	holder := connect(t, fx.direct)
	tx, err := holder.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	if _, err := tx.Exec(ctx, fencegate.FenceSQL, "order:43", int64(1)); err != nil {
		t.Fatal(err)
	}

	hostile := withOptions(t, proxied, "-c quote_all_identifiers=on")
	for i := range 5 {
		pe := refusedWith(t, hostile, fencegate.CodeSchemaInvalid)
		if i == 0 {
			t.Logf("refusal: %s\nhint: %s", pe.Message[:min(len(pe.Message), 300)], pe.Hint)
		}
		if !strings.Contains(pe.Hint, "Nothing was repaired") || strings.Contains(pe.Hint, "repaired what") {
			t.Errorf("hint %q: want it to say that nothing was repaired", pe.Hint)
		}
		if !strings.Contains(pe.Message, "does not find") {
			t.Errorf("message %q: want it to say the proxy's own check finds no problem", pe.Message[:min(len(pe.Message), 300)])
		}
	}
	if got := testutilCounter(p.Metrics().SchemaRepairs); got != 0 {
		t.Errorf("schema repairs after hostile sessions: %v, want 0", got)
	}
	if n := strings.Count(logs.String(), "repaired through the admin connection"); n != 0 {
		t.Errorf("%d repairs logged", n)
	}
	// The holder's fences go on at once.
	other := connect(t, proxied)
	if err := pgx.BeginFunc(ctx, other, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, fencegate.FenceSQL, "order:42", int64(1))
		return err
	}); err != nil {
		t.Fatal(err)
	}
}

// measureSeconds is how long TestHostileSessionLoopsLeaveFencesAlone
// measures: FENCEGATE_MEASURE_SECONDS, else 1.
func measureSeconds() time.Duration {
	if n, err := strconv.Atoi(os.Getenv("FENCEGATE_MEASURE_SECONDS")); err == nil && n > 0 {
		return time.Duration(n) * time.Second
	}
	return time.Second
}

// TestHostileSessionLoopsLeaveFencesAlone: two loops of sessions that
// connect with quote_all_identifiers=on, through a gate with an admin
// connection, beside an unrelated holder that fences and writes in a loop
// and another that keeps a fence open throughout.
// No repair runs, and the test logs how much of the window the holder spent
// waiting in its fence calls (FENCEGATE_MEASURE_SECONDS sets the window).
// Before the gate pinned the session's settings and left repairs to the
// admin connection's verdict, each hostile session ran an install that
// queued on the marks for up to 2 s, and the holder waited behind it.
func TestHostileSessionLoopsLeaveFencesAlone(t *testing.T) {
	fx := newFixture(t)
	var logs logBuffer
	proxied, p := proxytest.StartProxy(t, fx.direct, withAdmin(fx.admin, fx.db.Owner, &logs),
		proxytest.WithConfig(func(c *proxy.Config) { c.CheckInterval = time.Second }))
	admitted(t, proxied)
	ctx := context.Background()
	window := measureSeconds()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var hostileSessions, refused atomic.Int64
	hostile := withOptions(t, proxied, "-c quote_all_identifiers=on")
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
				c, err := pgx.Connect(cctx, hostile)
				cancel()
				hostileSessions.Add(1)
				if err != nil {
					refused.Add(1)
					continue
				}
				c.Close(ctx)
			}
		}()
	}
	// Another holder keeps a fence open throughout, as a long transaction
	// does: anything that wants the marks exclusively queues behind it.
	long := connect(t, fx.direct)
	ltx, err := long.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer ltx.Rollback(ctx) //nolint:errcheck
	if _, err := ltx.Exec(ctx, fencegate.FenceSQL, "order:43", int64(1)); err != nil {
		t.Fatal(err)
	}
	holder := connect(t, proxied)
	var waited time.Duration
	fences := 0
	began := time.Now()
	for time.Since(began) < window {
		err := pgx.BeginFunc(ctx, holder, func(tx pgx.Tx) error {
			t0 := time.Now()
			if _, err := tx.Exec(ctx, fencegate.FenceSQL, "order:42", int64(fences+1)); err != nil {
				return err
			}
			waited += time.Since(t0)
			_, err := tx.Exec(ctx, "UPDATE orders SET state = $1 WHERE id = 42", fmt.Sprint(fences))
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		fences++
		time.Sleep(20 * time.Millisecond)
	}
	elapsed := time.Since(began)
	close(stop)
	wg.Wait()
	t.Logf("window %s: %d fences, holder waited %s in fence calls (%.1f%% of the window, %.1f ms per fence); %d hostile sessions, %d refused; %v repairs",
		elapsed.Round(time.Millisecond), fences, waited.Round(time.Millisecond), 100*waited.Seconds()/elapsed.Seconds(),
		waited.Seconds()*1000/float64(max(fences, 1)), hostileSessions.Load(), refused.Load(), testutilCounter(p.Metrics().SchemaRepairs))
	if got := testutilCounter(p.Metrics().SchemaRepairs); got != 0 {
		t.Errorf("schema repairs during the hostile loops: %v, want 0", got)
	}
	if refused.Load() != 0 {
		t.Errorf("%d of %d sessions with quote_all_identifiers=on refused", refused.Load(), hostileSessions.Load())
	}
}
