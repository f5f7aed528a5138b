package pgfence_test

import (
	"context"
	"strings"
	"testing"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/pgfence"
	"github.com/fencegate/fencegate/pgfence/pgfencetest"
	"github.com/jackc/pgx/v5"
)

// chainRole makes a login role that is a member of the application role
// and owns schema s (its own name, usable by everyone) holding fn, a plain
// immutable plpgsql function of one int; it returns the role.
func chainRole(t *testing.T, f *fixture, prefix, fn string) string {
	t.Helper()
	r := pgfencetest.Role(t, f.db.DSN, prefix, "LOGIN")
	mustExec(t, f.admin, "GRANT "+f.db.App+" TO "+r+"; CREATE SCHEMA "+r+" AUTHORIZATION "+r+"; GRANT USAGE ON SCHEMA "+r+" TO PUBLIC;"+
		" SET ROLE "+r+"; CREATE FUNCTION "+r+"."+fn+"(i int) RETURNS int LANGUAGE plpgsql IMMUTABLE AS $$BEGIN RETURN i; END$$; RESET ROLE")
	return r
}

// TestPrivilegeCallChain: a role owning a function that code attached to a
// protected table reaches only through calls of functions the table's
// owner owns is refused, with the chain named. ANALYZE, autovacuum and
// CREATE INDEX run an index expression as the table's owner, so the
// function's owner replaces it and acts as the owner (a function that runs
// ALTER TABLE ... DISABLE TRIGGER fencegate_upd, TestAttackIndirectOwner).
func TestPrivilegeCallChain(t *testing.T) {
	f := newFixture(t)
	own := func(sig string) string { return "; ALTER FUNCTION " + sig + " OWNER TO " + f.data }

	plpgsql := chainRole(t, f, "fg_chpl_", "g_pl")
	mustExec(t, f.admin, "CREATE FUNCTION public.w_pl(i int) RETURNS int LANGUAGE plpgsql IMMUTABLE AS $$BEGIN RETURN "+plpgsql+".g_pl(i); END$$"+
		own("public.w_pl(int)")+"; CREATE INDEX lines_w_pl ON shop.lines (public.w_pl(qty))")

	atomic := chainRole(t, f, "fg_chat_", "g_at")
	mustExec(t, f.admin, "CREATE FUNCTION public.w_at(i int) RETURNS int LANGUAGE sql IMMUTABLE BEGIN ATOMIC SELECT "+atomic+".g_at(i); END"+
		own("public.w_at(int)")+"; CREATE INDEX orders_w_at ON shop.orders (public.w_at(customer))")

	// Two levels, unqualified and in another case in the plpgsql body: the
	// name match ignores the schema and the case.
	twoLevel := chainRole(t, f, "fg_ch2_", "g_two")
	mustExec(t, f.admin, "CREATE FUNCTION public.w_two_in(i int) RETURNS int LANGUAGE sql IMMUTABLE BEGIN ATOMIC SELECT "+twoLevel+".g_two(i); END"+
		own("public.w_two_in(int)")+
		"; CREATE FUNCTION public.w_two(i int) RETURNS int LANGUAGE plpgsql IMMUTABLE SET search_path = public AS $$BEGIN RETURN W_Two_In(i); END$$"+
		own("public.w_two(int)")+"; CREATE INDEX notes_w_two ON shop.notes (id) WHERE public.w_two(id) > 0")

	trig := chainRole(t, f, "fg_chtg_", "g_trig")
	mustExec(t, f.admin, "CREATE FUNCTION public.t_own() RETURNS trigger LANGUAGE plpgsql AS $$BEGIN PERFORM "+trig+".g_trig(1); RETURN NEW; END$$"+
		own("public.t_own()")+"; CREATE TRIGGER own_check BEFORE UPDATE ON shop.events FOR EACH ROW EXECUTE FUNCTION public.t_own()")

	// A function no protected table's code reaches: its owner stays an
	// ordinary role, however the application's own code calls it.
	unreached := chainRole(t, f, "fg_chno_", "g_unreached")
	mustExec(t, f.admin, "CREATE FUNCTION public.w_free(i int) RETURNS int LANGUAGE plpgsql IMMUTABLE AS $$BEGIN RETURN "+unreached+".g_unreached(i); END$$"+
		own("public.w_free(int)")+"; CREATE INDEX customers_w_free ON shop.customers (public.w_free(id))")

	for _, c := range []struct{ name, role, want string }{
		{"plpgsql wrapper", plpgsql, "function " + plpgsql + ".g_pl(integer), which an index of protected table shop.lines reaches through calls (shop.lines -> public.w_pl(integer) -> " + plpgsql + ".g_pl(integer))"},
		{"BEGIN ATOMIC wrapper", atomic, "(shop.orders -> public.w_at(integer) -> " + atomic + ".g_at(integer))"},
		{"two levels", twoLevel, "(shop.notes -> public.w_two(integer) -> public.w_two_in(integer) -> " + twoLevel + ".g_two(integer))"},
		{"owner's trigger function", trig, "which a trigger of protected table shop.events reaches through calls (shop.events -> public.t_own() -> " + trig + ".g_trig(integer))"},
		{"function no protected table reaches", unreached, ""},
		{"the application role", f.db.App, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := reasons(t, f.db.DSN, c.role)
			if c.want == "" {
				if len(got) != 0 {
					t.Fatalf("PrivilegeQuery as %s = %q, want no rows", c.role, got)
				}
				return
			}
			if !strings.Contains(strings.Join(got, "\n"), c.want) {
				t.Fatalf("PrivilegeQuery as %s = %q, want a row with %q", c.role, got, c.want)
			}
		})
	}

	// A member of the owning role is refused the same way.
	member := pgfencetest.Role(t, f.db.DSN, "fg_chmem_", "LOGIN")
	mustExec(t, f.admin, "GRANT "+plpgsql+" TO "+member)
	if got := strings.Join(reasons(t, f.db.DSN, member), "\n"); !strings.Contains(got, "is a member of "+plpgsql+", which owns function "+plpgsql+".g_pl(integer)") {
		t.Fatalf("PrivilegeQuery as a member of the owner = %q", got)
	}

	// A cycle of calls ends: the closure stops where nothing new is reached.
	mustExec(t, f.admin, "CREATE OR REPLACE FUNCTION public.w_free(i int) RETURNS int LANGUAGE plpgsql IMMUTABLE AS $$BEGIN IF i < 0 THEN RETURN public.w_pl(i); END IF; RETURN "+unreached+".g_unreached(i); END$$;"+
		" CREATE OR REPLACE FUNCTION public.w_pl(i int) RETURNS int LANGUAGE plpgsql IMMUTABLE AS $$BEGIN IF i < 0 THEN RETURN public.w_free(i); END IF; RETURN "+plpgsql+".g_pl(i); END$$")
	if got := strings.Join(reasons(t, f.db.DSN, unreached), "\n"); !strings.Contains(got, "(shop.lines -> public.w_pl(integer) -> public.w_free(integer) -> "+unreached+".g_unreached(integer))") {
		t.Fatalf("PrivilegeQuery as %s after a call cycle = %q, want the chain through w_free", unreached, got)
	}
}

// TestGateRefusesCallChainOwner: the gate refuses, with FG007, a member of
// the application role that owns a function a protected table's index
// reaches through its owner's wrapper, and still admits the application
// role.
func TestGateRefusesCallChainOwner(t *testing.T) {
	f := newFixtureVia(t, viaProxy)
	r := chainRole(t, f, "fg_chgate_", "g_gate")
	mustExec(t, f.admin, "CREATE FUNCTION public.w_gate(i int) RETURNS int LANGUAGE plpgsql IMMUTABLE AS $$BEGIN RETURN "+r+".g_gate(i); END$$;"+
		" ALTER FUNCTION public.w_gate(int) OWNER TO "+f.data+"; CREATE INDEX lines_w_gate ON shop.lines (public.w_gate(qty))")
	_, err := f.roleConn(t, r)
	expectErr(t, "a session of the owner of a function an index reaches through calls", err, fencegate.CodePrivilegedRole)
	if !strings.Contains(err.Error(), "shop.lines -> public.w_gate(integer) -> "+r+".g_gate(integer)") {
		t.Fatalf("refusal %q does not name the chain", err)
	}
	if _, err := f.roleConn(t, f.db.App); err != nil {
		t.Fatalf("the application role through the gate: %v", err)
	}
}

// indirectOwnerAttack plants the attack: role r (a member of the
// application role) owns g, which the table owner's wrapper calls from an
// index expression of shop.lines; r then makes g call a volatile h that
// disables shop.orders' fence triggers when it runs as the table's owner.
// It returns r.
func indirectOwnerAttack(t *testing.T, f *fixture) string {
	t.Helper()
	r := chainRole(t, f, "fg_atkind_", "g")
	mustExec(t, f.admin, "CREATE FUNCTION public.atk_wrap(i int) RETURNS int LANGUAGE plpgsql IMMUTABLE AS $$BEGIN RETURN "+r+".g(i); END$$;"+
		" ALTER FUNCTION public.atk_wrap(int) OWNER TO "+f.data+"; CREATE INDEX lines_atk ON shop.lines (public.atk_wrap(qty))")
	c := pgfencetest.Connect(t, pgfencetest.WithUser(t, f.db.DSN, r))
	mustExec(t, c, "CREATE FUNCTION "+r+".h() RETURNS void LANGUAGE plpgsql VOLATILE AS $$BEGIN IF current_user = '"+f.data+"' THEN"+
		" EXECUTE 'ALTER TABLE shop.orders DISABLE TRIGGER fencegate_upd, DISABLE TRIGGER fencegate_ins, DISABLE TRIGGER fencegate_del'; END IF; END$$;"+
		" CREATE OR REPLACE FUNCTION "+r+".g(i int) RETURNS int LANGUAGE plpgsql IMMUTABLE AS $$BEGIN PERFORM "+r+".h(); RETURN i; END$$")
	return r
}

// fenceTriggers is the enabled state of shop.orders' fence triggers.
func fenceTriggers(t *testing.T, f *fixture) string {
	t.Helper()
	var s string
	if err := f.admin.QueryRow(context.Background(), "SELECT string_agg(tgname || '=' || tgenabled::text, ' ' ORDER BY tgname) FROM pg_trigger WHERE tgrelid = 'shop.orders'::regclass AND tgname LIKE 'fencegate%'").Scan(&s); err != nil {
		t.Fatal(err)
	}
	return s
}

// TestAttackIndirectOwnerAnalyze: what the attack does without the DDL
// guard: ANALYZE run by a superuser evaluates the index expression as the
// table's owner, and the role's function disables the fence triggers. The
// gate's refusal of the role (TestPrivilegeCallChain) is what stands in its
// way; the role is named before and after the attack.
func TestAttackIndirectOwnerAnalyze(t *testing.T) {
	f := newFixture(t)
	before := fenceTriggers(t, f)
	r := indirectOwnerAttack(t, f)
	if got := strings.Join(reasons(t, f.db.DSN, r), "\n"); !strings.Contains(got, "public.atk_wrap(integer) -> "+r+".g(integer)") {
		t.Fatalf("PrivilegeQuery as the attacker = %q, want the chain named", got)
	}
	mustExec(t, f.admin, "ANALYZE shop.lines")
	if after := fenceTriggers(t, f); after == before {
		t.Fatalf("ANALYZE left the fence triggers as they were (%s): the attack this test documents no longer works; revisit the guard test and docs", after)
	}
}

// TestAttackIndirectOwnerAnalyzeGuard: with the DDL guard, the same
// ALTER TABLE ... DISABLE TRIGGER, run as the table's owner (not a member
// of the owner role) from inside ANALYZE's evaluation of the index
// expression, is refused and ANALYZE fails; the triggers stay enabled.
func TestAttackIndirectOwnerAnalyzeGuard(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	if _, err := pgfence.Install(ctx, f.admin, pgfence.InstallOptions{OwnerRole: f.db.Owner, GuardDDL: true}); err != nil {
		t.Fatalf("install the DDL guard: %v", err)
	}
	before := fenceTriggers(t, f)
	indirectOwnerAttack(t, f)
	_, err := f.admin.Exec(ctx, "ANALYZE shop.lines", pgx.QueryExecModeSimpleProtocol)
	expectErr(t, "ANALYZE running the planted DISABLE TRIGGER", err, fencegate.CodeProtectedDDL)
	if after := fenceTriggers(t, f); after != before {
		t.Fatalf("fence triggers after the refused ANALYZE: %s, want %s", after, before)
	}
}
