package proxy_test

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"testing"

	"github.com/fencegate/fencegate/pgfence/pgfencetest"
	"github.com/fencegate/fencegate/proxy/proxytest"
)

// TestIndirectBypassRoutesPsycopg2 sends every route of
// testdata/bypass_routes_indirect.py from psycopg2, as the application role,
// straight to PostgreSQL and through the proxy, and opens sessions through
// the proxy as two roles with more than the documented grants (a member of
// pg_write_all_data, a role with TRIGGER on the protected tables), which
// the gate must refuse. The script's referee fails it when a protected row
// changed or a mark went down.
func TestIndirectBypassRoutesPsycopg2(t *testing.T) {
	py := python(t)
	db := pgfencetest.New(t)
	data := pgfencetest.Role(t, db.DSN, "fg_data_", "NOLOGIN")
	execAdmin(t, db.DSN, fmt.Sprintf(bypassSQL, data, db.App))
	writeAll := pgfencetest.Role(t, db.DSN, "fg_etl_", "LOGIN IN ROLE pg_write_all_data, "+db.App)
	trigger := pgfencetest.Role(t, db.DSN, "fg_trig_", "LOGIN IN ROLE "+db.App)
	execAdmin(t, db.DSN, "GRANT TRIGGER ON ALL TABLES IN SCHEMA shop TO "+trigger)
	proxied := proxytest.Start(t, db.AppDSN)
	cmd := exec.Command(py, "testdata/bypass_routes_indirect.py", db.DSN, "direct="+db.AppDSN, "proxy="+proxied,
		"gate:write_all_data="+pgfencetest.WithUser(t, proxied, writeAll),
		"gate:trigger="+pgfencetest.WithUser(t, proxied, trigger))
	cmd.Env = append(os.Environ(), "PGCONNECT_TIMEOUT=10")
	out, err := cmd.CombinedOutput()
	t.Logf("bypass_routes_indirect.py:\n%s", out)
	if err != nil {
		t.Fatalf("bypass_routes_indirect.py: %v (see the FAIL lines above)", err)
	}
	if !bytes.Contains(out, []byte(" routes, 0 failed")) {
		t.Fatalf("bypass_routes_indirect.py ended without its summary line")
	}
}
