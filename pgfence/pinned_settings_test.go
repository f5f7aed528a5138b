package pgfence_test

import (
	"context"
	"net/url"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/pgfence"
	"github.com/fencegate/fencegate/pgfence/pgfencetest"
)

// TestAdminSessionsPinWhatIsPrinted: a database whose defaults change what
// PostgreSQL prints (quote_all_identifiers and the others of
// PinnedSettings, set by its owner with ALTER DATABASE ... SET) looks
// sound to status, and an install over it finds nothing to change: admin
// sessions pin those settings. Before, every name printed quoted and the
// inventory reported each expected item as unexpected.
func TestAdminSessionsPinWhatIsPrinted(t *testing.T) {
	db := pgfencetest.New(t)
	ctx := context.Background()
	u, err := url.Parse(db.DSN)
	if err != nil {
		t.Fatal(err)
	}
	name := strings.TrimPrefix(u.Path, "/")
	db.Exec(t, `ALTER DATABASE "`+name+`" SET quote_all_identifiers = on`)
	db.Exec(t, `ALTER DATABASE "`+name+`" SET standard_conforming_strings = off`)
	db.Exec(t, `ALTER DATABASE "`+name+`" SET extra_float_digits = -15`)
	db.Exec(t, `ALTER DATABASE "`+name+`" SET DateStyle = 'SQL, DMY'`)
	conn := pgfencetest.Connect(t, db.DSN) // a new session: the defaults apply
	var qai string
	if err := conn.QueryRow(ctx, "SHOW quote_all_identifiers").Scan(&qai); err != nil || qai != "on" {
		t.Fatalf("the database default did not apply: %q, %v", qai, err)
	}
	if err := pgfence.AdminSession(ctx, conn); err != nil {
		t.Fatal(err)
	}
	st, err := pgfence.Inspect(ctx, conn)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Problems) != 0 {
		t.Fatalf("status under the database's defaults: %d problems, first %q", len(st.Problems), st.Problems[0])
	}
	rep, err := pgfence.Install(ctx, conn, pgfence.InstallOptions{OwnerRole: db.Owner, Grant: []string{db.App}})
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range rep.Actions {
		if strings.Contains(a, "remov") || strings.Contains(a, "drop") {
			t.Errorf("install under the database's defaults: %s", a)
		}
	}
	t.Logf("actions: %q", rep.Actions)
}
