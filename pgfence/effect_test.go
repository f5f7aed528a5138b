package pgfence_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/pgfence"
	"github.com/fencegate/fencegate/pgfence/pgfencetest"
	"github.com/jackc/pgx/v5"
)

// effectRows is the effects as the superuser sees them: id, resource, token,
// target, payload, state.
func effectRows(t *testing.T, admin *pgx.Conn) []string {
	t.Helper()
	rows, err := admin.Query(context.Background(), `SELECT format('%s|%s|%s|%s|%s|%s', id, resource, token, target, payload, state) FROM fencegate.effects ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestEffectFenced: an effect is recorded only by a transaction that holds
// a standing fence on its resource, straight to PostgreSQL and through the
// gate; a stale holder, a holder without a fence, a holder whose fence was
// rolled back to a savepoint, a holder of another resource's fence and a
// rolled-back transaction leave no effect.
func TestEffectFenced(t *testing.T) {
	for _, via := range []path{direct, viaProxy} {
		t.Run(string(via), func(t *testing.T) {
			ctx := context.Background()
			f := newFixtureVia(t, via)
			app := f.app

			// The current holder: recorded, with its token.
			tx, err := app.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := tx.Exec(ctx, fencegate.FenceSQL, "order:1", int64(7)); err != nil {
				t.Fatal(err)
			}
			var id int64
			if err := tx.QueryRow(ctx, fencegate.EffectSQL, "order:1", "payments", `{"amount": 10}`).Scan(&id); err != nil {
				t.Fatal(err)
			}
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			want := []string{itoa(id) + `|order:1|7|payments|{"amount": 10}|pending`}
			if got := effectRows(t, f.admin); len(got) != 1 || got[0] != want[0] {
				t.Fatalf("effects: %q, want %q", got, want)
			}

			// A stale holder: its fence is refused, and so is everything
			// after it, caught or not.
			tx, err = app.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := tx.Exec(ctx, "SAVEPOINT s"); err != nil {
				t.Fatal(err)
			}
			_, err = tx.Exec(ctx, fencegate.FenceSQL, "order:1", int64(6))
			wantRefused(t, err, fencegate.CodeStaleToken, "order:1")
			if _, err := tx.Exec(ctx, "ROLLBACK TO SAVEPOINT s"); err != nil {
				t.Fatal(err)
			}
			_, err = tx.Exec(ctx, fencegate.EffectSQL, "order:1", "payments", `{"amount": 99}`)
			wantRefused(t, err, fencegate.CodeUnfenced, "order:1")
			tx.Rollback(ctx) //nolint:errcheck

			// No fence at all, a fence on another resource, a fence rolled
			// back to a savepoint.
			for name, fences := range map[string][]string{"none": nil, "other": {"order:2"}} {
				err := attempt(ctx, app, fences, []string{`SELECT fencegate.effect('order:1', 'payments', '{"amount": 98}')`}, true)
				if err == nil {
					t.Fatalf("%s: effect without a fence on order:1 accepted", name)
				}
				wantRefused(t, err, fencegate.CodeUnfenced, "order:1")
			}
			tx, err = app.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for _, q := range []string{"SAVEPOINT s", "SELECT fencegate.fence('order:1', 8)", "ROLLBACK TO SAVEPOINT s"} {
				if _, err := tx.Exec(ctx, q); err != nil {
					t.Fatal(err)
				}
			}
			_, err = tx.Exec(ctx, fencegate.EffectSQL, "order:1", "payments", `{"amount": 97}`)
			wantRefused(t, err, fencegate.CodeUnfenced, "order:1")
			tx.Rollback(ctx) //nolint:errcheck

			// A rolled-back transaction leaves nothing.
			if err := attempt(ctx, app, nil, nil, false); err != nil {
				t.Fatal(err)
			}
			tx, err = app.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := tx.Exec(ctx, fencegate.FenceSQL, "order:1", int64(9)); err != nil {
				t.Fatal(err)
			}
			if _, err := tx.Exec(ctx, fencegate.EffectSQL, "order:1", "payments", `{"amount": 96}`); err != nil {
				t.Fatal(err)
			}
			if err := tx.Rollback(ctx); err != nil {
				t.Fatal(err)
			}

			// Misuse.
			for _, c := range []struct {
				resource, target string
				payload          any
			}{
				{"", "payments", `{}`},
				{strings.Repeat("x", 1025), "payments", `{}`},
				{"order:1", "", `{}`},
				{"order:1", "http://evil.example/", `{}`},
				{"order:1", "pay ments", `{}`},
				{"order:1", "payments", nil},
			} {
				tx, err := app.Begin(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := tx.Exec(ctx, fencegate.FenceSQL, "order:1", int64(10)); err != nil {
					t.Fatal(err)
				}
				_, err = tx.Exec(ctx, fencegate.EffectSQL, c.resource, c.target, c.payload)
				wantRefused(t, err, fencegate.CodeMisuse)
				tx.Rollback(ctx) //nolint:errcheck
			}
			if got := effectRows(t, f.admin); len(got) != 1 {
				t.Fatalf("effects after the refused attempts: %q, want only %q", got, want)
			}
		})
	}
}

// TestEffectPrivileges: the application role records effects only through
// fencegate.effect: it cannot read the effects (others' payloads), insert,
// change or delete them, nor claim or settle them as a relay does; a role
// without the grants cannot record one; a relay role reaches them only
// through the relay's functions and cannot record one.
func TestEffectPrivileges(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	if err := attempt(ctx, f.app, []string{"order:1"}, []string{`SELECT fencegate.effect('order:1', 'payments', '{"card": "4242"}')`}, true); err != nil {
		t.Fatal(err)
	}
	relay := pgfencetest.Role(t, f.db.DSN, "fg_relay_", "LOGIN")
	if _, err := pgfence.Install(ctx, f.admin, pgfence.InstallOptions{OwnerRole: f.db.Owner, Relay: []string{relay}}); err != nil {
		t.Fatal(err)
	}
	stranger := pgfencetest.Role(t, f.db.DSN, "fg_stranger_", "LOGIN")
	relayConn := pgfencetest.Connect(t, pgfencetest.WithUser(t, f.db.DSN, relay))
	strangerConn := pgfencetest.Connect(t, pgfencetest.WithUser(t, f.db.DSN, stranger))

	denied := func(who string, conn *pgx.Conn, q string) {
		t.Helper()
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx) //nolint:errcheck
		if who == "app" {
			if _, err := tx.Exec(ctx, "SELECT fencegate.fence('order:1', 100)"); err != nil {
				t.Fatal(err)
			}
		}
		_, err = tx.Exec(ctx, q)
		if code := sqlstate(err); code != "42501" {
			t.Fatalf("%s: %s: %v (SQLSTATE %q), want permission denied", who, q, err, code)
		}
	}
	tableQs := []string{
		"SELECT payload FROM fencegate.effects",
		"SELECT count(*) FROM fencegate.effects",
		`INSERT INTO fencegate.effects (resource, token, target, payload, idem_key) VALUES ('order:1', 100, 'payments', '{}', gen_random_uuid())`,
		"UPDATE fencegate.effects SET state = 'delivered'",
		"UPDATE fencegate.effects SET payload = '{\"card\": \"0000\"}'",
		"DELETE FROM fencegate.effects",
		"TRUNCATE fencegate.effects",
	}
	relayQs := []string{
		"SELECT * FROM fencegate.effect_claim(ARRAY['payments'], 10)",
		"SELECT fencegate.effect_record(1, 'delivered', 200, '', NULL, NULL)",
		"SELECT * FROM fencegate.effect_stats()",
		"SELECT fencegate.effect_prune('0', 10)",
	}
	for _, q := range tableQs {
		denied("app", f.app, q)
		denied("relay", relayConn, q)
		denied("stranger", strangerConn, q)
	}
	for _, q := range relayQs {
		denied("app", f.app, q)
		denied("stranger", strangerConn, q)
	}
	denied("stranger", strangerConn, "SELECT fencegate.effect('order:1', 'payments', '{}')")
	denied("relay", relayConn, "SELECT fencegate.effect('order:1', 'payments', '{}')")
	if got := effectRows(t, f.admin); len(got) != 1 {
		t.Fatalf("effects: %q", got)
	}
	if h := health(t, f.admin); len(h) != 0 {
		t.Fatalf("health with a relay role: %q", h)
	}
	// Install refuses to make an application role a relay.
	if _, err := pgfence.Install(ctx, f.admin, pgfence.InstallOptions{OwnerRole: f.db.Owner, Relay: []string{f.db.App}}); err == nil {
		t.Fatal("install made the application role a relay")
	}
	// An upgrade keeps the relay's grants, and health stays clean.
	if rep, err := pgfence.Install(ctx, f.admin, pgfence.InstallOptions{OwnerRole: f.db.Owner}); err != nil || len(rep.Actions) != 0 {
		t.Fatalf("second install: %v, %+v", err, rep)
	}
}

// TestEffectRelayFunctions: the relay role claims the oldest pending effect
// of each resource, at most once at a time across transactions, settles it,
// and cannot settle one another transaction holds.
func TestEffectRelayFunctions(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	relay := pgfencetest.Role(t, f.db.DSN, "fg_relay_", "LOGIN")
	if _, err := pgfence.Install(ctx, f.admin, pgfence.InstallOptions{OwnerRole: f.db.Owner, Relay: []string{relay}}); err != nil {
		t.Fatal(err)
	}
	for i, r := range []string{"order:1", "order:1", "order:2", "order:1"} {
		if err := attempt(ctx, f.app, []string{r}, []string{`SELECT fencegate.effect('` + r + `', 'payments', '{"n": ` + itoa(int64(i)) + `}')`}, true); err != nil {
			t.Fatal(err)
		}
	}
	a := pgfencetest.Connect(t, pgfencetest.WithUser(t, f.db.DSN, relay))
	b := pgfencetest.Connect(t, pgfencetest.WithUser(t, f.db.DSN, relay))
	claim := func(tx pgx.Tx) []string {
		t.Helper()
		rows, err := tx.Query(ctx, "SELECT resource || '#' || (payload->>'n') FROM fencegate.effect_claim(ARRAY['payments'], 10)")
		if err != nil {
			t.Fatal(err)
		}
		out, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	txA, err := a.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := claim(txA); len(got) != 2 || got[0] != "order:1#0" || got[1] != "order:2#2" {
		t.Fatalf("first claim: %q, want the head of each resource", got)
	}
	txB, err := b.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := claim(txB); len(got) != 0 {
		t.Fatalf("second relay claimed %q while the first holds the heads", got)
	}
	var first int64
	if err := f.admin.QueryRow(ctx, "SELECT min(id) FROM fencegate.effects").Scan(&first); err != nil {
		t.Fatal(err)
	}
	if _, err := txB.Exec(ctx, "SELECT fencegate.effect_record($1, 'delivered', 200, 'ok', NULL, NULL)", first); sqlstate(err) != "55P03" {
		t.Fatalf("settling an effect another relay holds: %v, want lock_not_available", err)
	}
	txB.Rollback(ctx) //nolint:errcheck
	var ok bool
	if err := txA.QueryRow(ctx, "SELECT fencegate.effect_record($1, 'retry', 503, 'busy', 'HTTP 503', now() + interval '1 hour')", first).Scan(&ok); err != nil || !ok {
		t.Fatalf("record retry: %v %v", ok, err)
	}
	if err := txA.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	// The head of order:1 waits for its retry: nothing of order:1 overtakes it.
	txB, err = b.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := claim(txB); len(got) != 1 || got[0] != "order:2#2" {
		t.Fatalf("claim while order:1's head waits: %q, want only order:2#2", got)
	}
	txB.Rollback(ctx) //nolint:errcheck
	if _, err := f.admin.Exec(ctx, "UPDATE fencegate.effects SET next_at = now() - interval '1 second' WHERE id = $1", first); err != nil {
		t.Fatal(err)
	}
	txB, err = b.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := claim(txB); len(got) != 2 || got[0] != "order:1#0" {
		t.Fatalf("claim after the retry time: %q", got)
	}
	if err := txB.QueryRow(ctx, "SELECT fencegate.effect_record($1, 'delivered', 200, 'ok', NULL, NULL)", first).Scan(&ok); err != nil || !ok {
		t.Fatalf("record delivered: %v %v", ok, err)
	}
	if err := txB.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	txB, err = b.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := claim(txB); len(got) != 2 || got[0] != "order:1#1" {
		t.Fatalf("claim after delivery: %q, want order:1#1 next", got)
	}
	txB.Rollback(ctx) //nolint:errcheck
	var pending, failed int64
	var oldest *time.Time
	if err := b.QueryRow(ctx, "SELECT * FROM fencegate.effect_stats()").Scan(&pending, &failed, &oldest); err != nil || pending != 3 || failed != 0 || oldest == nil {
		t.Fatalf("stats: %d %d %v %v", pending, failed, oldest, err)
	}
}

// TestEffectOrderIsCommitOrder: effects of one resource are numbered in the
// order their transactions committed, even when the later transaction
// started first and asked for the fence first.
func TestEffectOrderIsCommitOrder(t *testing.T) {
	ctx := context.Background()
	db := pgfencetest.New(t)
	a, b := db.AppConn(t), db.AppConn(t)
	txB, err := b.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// B takes an id on another resource first (an id from the sequence).
	if _, err := txB.Exec(ctx, fencegate.FenceSQL, "other", int64(1)); err != nil {
		t.Fatal(err)
	}
	var idOther int64
	if err := txB.QueryRow(ctx, fencegate.EffectSQL, "other", "t", `{}`).Scan(&idOther); err != nil {
		t.Fatal(err)
	}
	txA, err := a.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := txA.Exec(ctx, fencegate.FenceSQL, "r", int64(1)); err != nil {
		t.Fatal(err)
	}
	done := make(chan int64, 1)
	go func() {
		var id int64
		if _, err := txB.Exec(ctx, fencegate.FenceSQL, "r", int64(2)); err != nil {
			t.Error(err)
		}
		if err := txB.QueryRow(ctx, fencegate.EffectSQL, "r", "t", `{}`).Scan(&id); err != nil {
			t.Error(err)
		}
		if err := txB.Commit(ctx); err != nil {
			t.Error(err)
		}
		done <- id
	}()
	var idA int64
	if err := txA.QueryRow(ctx, fencegate.EffectSQL, "r", "t", `{}`).Scan(&idA); err != nil {
		t.Fatal(err)
	}
	if err := txA.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	idB := <-done
	if !(idOther < idA && idA < idB) {
		t.Fatalf("ids: other %d, A %d (committed first), B %d", idOther, idA, idB)
	}
}

// TestEffectFloor: after a prune raised the floor, a holder whose token is
// at or below it records no effect.
func TestEffectFloor(t *testing.T) {
	ctx := context.Background()
	db := pgfencetest.New(t)
	app, admin := db.AppConn(t), db.Admin(t)
	if _, err := admin.Exec(ctx, "SELECT fencegate.prune(50)"); err != nil {
		t.Fatal(err)
	}
	tx, err := app.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	_, err = tx.Exec(ctx, fencegate.FenceSQL, "fresh", int64(50))
	wantRefused(t, err, fencegate.CodeStaleToken, "floor")
}

// TestEffectSequenceAltered: a cached or stepping id sequence would break
// the per-resource order; health reports it and an upgrade repairs it.
func TestEffectSequenceAltered(t *testing.T) {
	ctx := context.Background()
	db := pgfencetest.New(t)
	admin := db.Admin(t)
	for _, alter := range []string{"CACHE 50", "INCREMENT 2", "CYCLE"} {
		if _, err := admin.Exec(ctx, "ALTER SEQUENCE fencegate.effects_id_seq "+alter); err != nil {
			t.Fatal(err)
		}
		h := health(t, admin)
		if len(h) != 1 || !strings.Contains(h[0], "effects_id_seq") {
			t.Fatalf("%s: health %q", alter, h)
		}
		if _, err := pgfence.Install(ctx, admin, pgfence.InstallOptions{OwnerRole: db.Owner}); err != nil {
			t.Fatal(err)
		}
		if h := health(t, admin); len(h) != 0 {
			t.Fatalf("after the upgrade: %q", h)
		}
	}
}
