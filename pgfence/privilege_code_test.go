package pgfence_test

import (
	"strings"
	"testing"

	"github.com/fencegate/fencegate/pgfence/pgfencetest"
)

// TestPrivilegeQueryCodeAndGrants: the roles that reach a protected table's
// owner rights or its checks without owning anything fencegate looks at
// first: the owner of a function or operator that code attached to a
// protected table runs (it runs as the table's owner in ANALYZE and
// REINDEX), a holder of TRIGGER (CREATE OR REPLACE TRIGGER replaces a
// check), and a member of pg_write_all_data (writes the marks).
func TestPrivilegeQueryCodeAndGrants(t *testing.T) {
	f := newFixture(t)
	dsn := f.db.DSN
	role := func(prefix, attrs string) string { return pgfencetest.Role(t, dsn, prefix, attrs) }

	fnOwner := role("fg_fnidx_", "LOGIN")
	mustExec(t, f.admin, "CREATE SCHEMA fgcode; GRANT USAGE ON SCHEMA fgcode TO PUBLIC;"+
		" CREATE FUNCTION fgcode.norm(text) RETURNS text LANGUAGE sql IMMUTABLE AS $$SELECT lower($1)$$;"+
		" ALTER FUNCTION fgcode.norm(text) OWNER TO "+fnOwner+";"+
		" CREATE INDEX orders_norm ON shop.orders (fgcode.norm(state))")
	checkOwner := role("fg_fnchk_", "LOGIN")
	mustExec(t, f.admin, "CREATE FUNCTION fgcode.positive(numeric) RETURNS boolean LANGUAGE sql IMMUTABLE AS $$SELECT $1 >= 0$$;"+
		" ALTER FUNCTION fgcode.positive(numeric) OWNER TO "+checkOwner+";"+
		" ALTER TABLE shop.orders ADD CONSTRAINT orders_positive CHECK (fgcode.positive(amount))")
	opOwner := role("fg_opown_", "LOGIN")
	mustExec(t, f.admin, "CREATE FUNCTION fgcode.same(text, text) RETURNS boolean LANGUAGE sql IMMUTABLE AS $$SELECT $1 = $2$$;"+
		" CREATE OPERATOR fgcode.=== (LEFTARG = text, RIGHTARG = text, FUNCTION = fgcode.same);"+
		" ALTER OPERATOR fgcode.=== (text, text) OWNER TO "+opOwner+";"+
		" ALTER TABLE shop.orders ADD CONSTRAINT orders_state CHECK (state OPERATOR(fgcode.===) state)")
	trig := role("fg_trig_", "LOGIN")
	mustExec(t, f.admin, "GRANT TRIGGER ON shop.orders TO "+trig)
	trigGroup := role("fg_triggrp_", "NOLOGIN")
	trigMember := role("fg_trigmem_", "LOGIN NOINHERIT")
	mustExec(t, f.admin, "GRANT TRIGGER ON shop.events_p0 TO "+trigGroup+"; GRANT "+trigGroup+" TO "+trigMember)
	writeAll := role("fg_wall_", "LOGIN")
	mustExec(t, f.admin, "GRANT pg_write_all_data TO "+writeAll)

	for _, c := range []struct{ name, role, want string }{
		{"the application role still passes", f.db.App, ""},
		{"owner of a function in an index", fnOwner, "function fgcode.norm(text), which an index of protected table shop.orders runs"},
		{"owner of a function in a constraint", checkOwner, "function fgcode.positive(numeric), which a constraint of protected table shop.orders runs"},
		{"owner of an operator in a constraint", opOwner, "operator fgcode.===(text,text), which a constraint of protected table shop.orders runs"},
		{"holder of TRIGGER", trig, "holds TRIGGER on protected table shop.orders"},
		{"member of a role holding TRIGGER", trigMember, "is a member of " + trigGroup + ", which holds TRIGGER on protected table shop.events_p0"},
		{"pg_write_all_data", writeAll, "pg_write_all_data, which can write every table, fencegate.marks included"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := reasons(t, dsn, c.role)
			if c.want == "" {
				if len(got) != 0 {
					t.Fatalf("PrivilegeQuery as %s = %q, want no rows", c.role, got)
				}
				return
			}
			for _, r := range got {
				if strings.Contains(r, c.want) {
					return
				}
			}
			t.Fatalf("PrivilegeQuery as %s = %q, want a row with %q", c.role, got, c.want)
		})
	}

	// PUBLIC holding TRIGGER makes every role one that can replace a check.
	mustExec(t, f.admin, "GRANT TRIGGER ON shop.notes TO PUBLIC")
	got := reasons(t, dsn, f.db.App)
	if len(got) == 0 || !strings.Contains(strings.Join(got, "\n"), "holds TRIGGER on protected table shop.notes") {
		t.Fatalf("PrivilegeQuery as the application role with TRIGGER granted to PUBLIC = %q, want the TRIGGER reason", got)
	}
}
