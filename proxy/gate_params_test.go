package proxy_test

import (
	"context"
	"testing"

	"github.com/fencegate/fencegate/pgfence/pgfencetest"
	"github.com/fencegate/fencegate/proxy/proxytest"
)

// TestGateKeepsItsSearchPathToItself: the gate's transaction sets
// search_path LOCAL, and PostgreSQL 18 reports search_path to clients in a
// ParameterStatus. Through the gate, the client's last reported value of
// every parameter is its session's own, as straight to PostgreSQL, with
// and without a search_path of the client's choosing.
func TestGateKeepsItsSearchPathToItself(t *testing.T) {
	db := pgfencetest.New(t)
	proxied := proxytest.Start(t, db.AppDSN)
	ctx := context.Background()
	for _, opts := range []string{"", "options=-c%20search_path%3Dpublic,pg_catalog"} {
		direct, gated := db.AppDSN, proxied
		if opts != "" {
			direct, gated = withParams(direct, opts), withParams(gated, opts)
		}
		dc, gc := connect(t, direct), connect(t, gated)
		for _, name := range []string{"search_path", "DateStyle", "TimeZone", "application_name", "standard_conforming_strings"} {
			want := dc.PgConn().ParameterStatus(name)
			if got := gc.PgConn().ParameterStatus(name); got != want {
				t.Errorf("options %q: the client was told %s = %q through the gate, %q straight", opts, name, got, want)
			}
		}
		var actual string
		if err := gc.QueryRow(ctx, "SHOW search_path").Scan(&actual); err != nil {
			t.Fatal(err)
		}
		if reported := gc.PgConn().ParameterStatus("search_path"); reported != "" && reported != actual {
			t.Errorf("options %q: reported search_path %q, the session's is %q", opts, reported, actual)
		}
	}
}
