package pgfence_test

import (
	"context"
	"encoding/hex"
	"errors"
	"strings"
	"testing"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/pgfence"
	"github.com/fencegate/fencegate/pgfence/pgfencetest"
	"github.com/fencegate/fencegate/tokensign"
	"github.com/jackc/pgx/v5"
)

func keyring(t testing.TB, lines ...string) *tokensign.Keyring {
	t.Helper()
	r, err := tokensign.ParseKeys(strings.NewReader(strings.Join(lines, "\n")))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

var (
	keyOld = "k2025 " + strings.Repeat("1f", 32)
	keyNew = "k2026 " + strings.Repeat("e7", 48)
	keyBad = "k2026 " + strings.Repeat("e8", 48) // same id, other secret
)

func requireSigned(t testing.TB, db *pgfencetest.DB, cluster string, keys *tokensign.Keyring) {
	t.Helper()
	if _, err := pgfence.RequireSigned(context.Background(), db.Admin(t), cluster, keys); err != nil {
		t.Fatalf("require signed: %v", err)
	}
}

func marks(t *testing.T, conn *pgx.Conn) map[string]int64 {
	t.Helper()
	rows, err := conn.Query(context.Background(), "SELECT resource, token FROM fencegate.marks")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for rows.Next() {
		var r string
		var tok int64
		if err := rows.Scan(&r, &tok); err != nil {
			t.Fatal(err)
		}
		out[r] = tok
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func sameMarks(a, b map[string]int64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// TestSignedFence: on a database that requires signed tokens, every token the
// token service did not sign for this cluster and this resource is refused
// and advances nothing; a key rotation keeps old proofs valid while the old
// key is listed.
func TestSignedFence(t *testing.T) {
	ctx := context.Background()
	db := pgfencetest.New(t)
	app := db.AppConn(t)
	admin := db.Admin(t)
	const cluster = "c-1b2f"
	ts := keyring(t, keyOld)
	// Before signing is required: the 3-arg fence checks only the proof's form.
	if _, err := app.Exec(ctx, fencegate.FenceSignedSQL, "acct:1", int64(5), ts.Sign(cluster, "acct:1", 5)); err != nil {
		t.Fatalf("signed fence on an unsigned database: %v", err)
	}
	requireSigned(t, db, cluster, ts)
	if _, err := app.Exec(ctx, fencegate.FenceSignedSQL, "acct:1", int64(6), ts.Sign(cluster, "acct:1", 6)); err != nil {
		t.Fatalf("signed fence: %v", err)
	}
	other := keyring(t, "k2025 "+strings.Repeat("2f", 32)) // another cluster's key, same id
	for _, c := range []struct {
		name, resource string
		token          int64
		proof          string
		code           string
		says           []string
	}{
		{"never minted", "acct:1", 1 << 62, ts.Sign(cluster, "acct:1", 6), fencegate.CodeBadProof, []string{"does not verify under key k2025"}},
		{"minted for another resource", "acct:1", 9, ts.Sign(cluster, "acct:2", 9), fencegate.CodeBadProof, []string{"'acct:1'", "token 9"}},
		{"another cluster", "acct:1", 9, ts.Sign("c-other", "acct:1", 9), fencegate.CodeBadProof, []string{"cluster c-1b2f"}},
		{"another cluster's key", "acct:1", 9, other.Sign(cluster, "acct:1", 9), fencegate.CodeBadProof, nil},
		{"unknown key id", "acct:1", 9, keyring(t, "zz "+strings.Repeat("1f", 32)).Sign(cluster, "acct:1", 9), fencegate.CodeBadProof, []string{"key zz, which this database does not hold"}},
		{"two-argument fence", "acct:1", 9, "", fencegate.CodeMisuse, []string{"requires signed tokens", "fencegate.fence(resource, token, proof)"}},
		{"fence_many", "acct:1", 9, "-", fencegate.CodeMisuse, []string{"requires signed tokens"}},
		{"empty proof", "acct:1", 9, "x", fencegate.CodeMisuse, []string{"is malformed: it is empty"}},
		{"no dot", "acct:1", 9, "k2025" + strings.Repeat("a", 64), fencegate.CodeMisuse, []string{`has no "."`}},
		{"bad key id", "acct:1", 9, "k 1." + strings.Repeat("a", 64), fencegate.CodeMisuse, []string{"key id"}},
		{"short mac", "acct:1", 9, "k2025.abc", fencegate.CodeMisuse, []string{"64 lowercase hex digits", "got 3"}},
		{"uppercase mac", "acct:1", 9, "k2025." + strings.Repeat("A", 64), fencegate.CodeMisuse, []string{"64 lowercase hex digits"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := marks(t, admin)
			var err error
			switch c.proof {
			case "":
				_, err = app.Exec(ctx, fencegate.FenceSQL, c.resource, c.token)
			case "-":
				_, err = app.Exec(ctx, fencegate.FenceManySQL, []string{c.resource}, c.token)
			case "x":
				_, err = app.Exec(ctx, fencegate.FenceSignedSQL, c.resource, c.token, "")
			default:
				_, err = app.Exec(ctx, fencegate.FenceSignedSQL, c.resource, c.token, c.proof)
			}
			wantRefused(t, err, c.code, c.says...)
			if after := marks(t, admin); !sameMarks(before, after) {
				t.Fatalf("marks changed from %v to %v", before, after)
			}
		})
	}

	// Rotation: the new key signs, the old one still verifies.
	rotated := keyring(t, keyNew, keyOld)
	requireSigned(t, db, cluster, rotated)
	if _, err := app.Exec(ctx, fencegate.FenceSignedSQL, "acct:1", int64(7), ts.Sign(cluster, "acct:1", 7)); err != nil {
		t.Fatalf("old key after rotation: %v", err)
	}
	if _, err := app.Exec(ctx, fencegate.FenceSignedSQL, "acct:1", int64(8), rotated.Sign(cluster, "acct:1", 8)); err != nil {
		t.Fatalf("new key after rotation: %v", err)
	}
	if !strings.HasPrefix(rotated.Sign(cluster, "a", 1), "k2026.") {
		t.Fatal("the first key does not sign")
	}
	// A key of the same id but another secret does not verify.
	_, err := app.Exec(ctx, fencegate.FenceSignedSQL, "acct:1", int64(9), keyring(t, keyBad).Sign(cluster, "acct:1", 9))
	wantRefused(t, err, fencegate.CodeBadProof)
	// Stale stays stale, proof or not.
	_, err = app.Exec(ctx, fencegate.FenceSignedSQL, "acct:1", int64(6), rotated.Sign(cluster, "acct:1", 6))
	wantRefused(t, err, fencegate.CodeStaleToken, "current token is 8")
	// Non-ASCII resources are signed as their UTF-8 bytes.
	if _, err := app.Exec(ctx, fencegate.FenceSignedSQL, "é/ü", int64(10), rotated.Sign(cluster, "é/ü", 10)); err != nil {
		t.Fatalf("non-ASCII resource: %v", err)
	}

	// The status, then back to unsigned.
	st, err := pgfence.SigningStatus(ctx, admin)
	if err != nil || !st.Required || st.ClusterID != cluster || strings.Join(st.KeyIDs, ",") != "k2026,k2025" {
		t.Fatalf("signing status: %+v, %v", st, err)
	}
	if _, err := pgfence.AllowUnsigned(ctx, admin); err != nil {
		t.Fatal(err)
	}
	if _, err := app.Exec(ctx, fencegate.FenceSQL, "acct:1", int64(11)); err != nil {
		t.Fatalf("unsigned again: %v", err)
	}
}

// TestSigningKeysPrivate: application roles cannot read, write or lock the
// key table; a grant on it is a problem HealthQuery names and Install
// revokes; keys survive Install.
func TestSigningKeysPrivate(t *testing.T) {
	ctx := context.Background()
	db := pgfencetest.New(t)
	requireSigned(t, db, "c", keyring(t, keyOld))
	app := db.AppConn(t)
	for _, q := range []string{
		"SELECT * FROM fencegate.signing_keys",
		"SELECT count(*) FROM fencegate.signing_keys",
		"DELETE FROM fencegate.signing_keys",
		"INSERT INTO fencegate.signing_keys VALUES ('x', 'c', '', '', '', 0)",
		"TRUNCATE fencegate.signing_keys",
		"COPY fencegate.signing_keys TO STDOUT",
	} {
		_, err := app.Exec(ctx, q)
		expectErr(t, q, err, "42501")
	}
	if _, err := pgfence.SigningStatus(ctx, app); !errors.Is(err, pgfence.ErrPrivilege) {
		t.Fatalf("signing status as the application: %v", err)
	}
	if _, err := pgfence.RequireSigned(ctx, app, "c", keyring(t, keyNew)); !errors.Is(err, pgfence.ErrPrivilege) {
		t.Fatalf("require signed as the application: %v", err)
	}
	admin := db.Admin(t)
	if got := health(t, admin); len(got) != 0 {
		t.Fatalf("health with signing keys: %v", got)
	}
	mustExec(t, admin, "GRANT SELECT ON fencegate.signing_keys TO "+db.App)
	if got := strings.Join(health(t, admin), "\n"); !strings.Contains(got, "SELECT on fencegate.signing_keys is granted to "+db.App) {
		t.Fatalf("health does not name the grant: %s", got)
	}
	rep, err := pgfence.Install(ctx, admin, pgfence.InstallOptions{OwnerRole: db.Owner})
	if err != nil {
		t.Fatal(err)
	}
	if got := health(t, admin); len(got) != 0 {
		t.Fatalf("health after install: %v (actions %v)", got, rep.Actions)
	}
	if _, err := app.Exec(ctx, "SELECT * FROM fencegate.signing_keys"); sqlstate(err) != "42501" {
		t.Fatalf("application reads the keys after install: %v", err)
	}
	st, err := pgfence.SigningStatus(ctx, admin)
	if err != nil || !st.Required || len(st.KeyIDs) != 1 {
		t.Fatalf("keys after install: %+v, %v", st, err)
	}
	// The application can still fence with a proof and execute nothing new.
	if _, err := app.Exec(ctx, fencegate.FenceSignedSQL, "r", int64(1), keyring(t, keyOld).Sign("c", "r", 1)); err != nil {
		t.Fatal(err)
	}
	// A role that reads all data can read the keys: the gate refuses it.
	reader := pgfencetest.Role(t, db.DSN, "fg_reader_", "LOGIN")
	mustExec(t, admin, "GRANT pg_read_all_data TO "+reader)
	if got := strings.Join(reasons(t, db.DSN, reader), "\n"); !strings.Contains(got, "pg_read_all_data, which can read the signing keys") {
		t.Fatalf("PrivilegeQuery for a pg_read_all_data member: %q", got)
	}
}

// TestSignedFenceOverload: an overload of fence planted next to the two
// fences is found by HealthQuery and makes both fences refuse (FG005);
// Install drops it and keeps the signed one.
func TestSignedFenceOverload(t *testing.T) {
	ctx := context.Background()
	db := pgfencetest.New(t)
	requireSigned(t, db, "c", keyring(t, keyOld))
	admin := db.Admin(t)
	mustExec(t, admin, "SET ROLE "+db.Owner+"; CREATE FUNCTION fencegate.fence(resource text, token bigint, proof varchar) RETURNS bigint LANGUAGE sql AS 'SELECT 1::bigint'; RESET ROLE")
	if got := strings.Join(health(t, admin), "\n"); !strings.Contains(got, "fencegate.fence(text,bigint,character varying) is not part of schema fencegate") {
		t.Fatalf("health misses the overload: %s", got)
	}
	app := db.AppConn(t)
	_, err := app.Exec(ctx, fencegate.FenceSignedSQL, "r", int64(1), keyring(t, keyOld).Sign("c", "r", 1))
	wantRefused(t, err, fencegate.CodeSchemaInvalid)
	if _, err := pgfence.Install(ctx, admin, pgfence.InstallOptions{OwnerRole: db.Owner}); err != nil {
		t.Fatal(err)
	}
	if got := health(t, admin); len(got) != 0 {
		t.Fatalf("health after install: %v", got)
	}
	if _, err := app.Exec(ctx, fencegate.FenceSignedSQL, "r", int64(1), keyring(t, keyOld).Sign("c", "r", 1)); err != nil {
		t.Fatal(err)
	}
}

// TestUpgradeFromV2 installs version 2 as it was shipped, takes marks,
// upgrades, and checks that the marks are kept and the signed fence works.
func TestUpgradeFromV2(t *testing.T) {
	ctx := context.Background()
	db := pgfencetest.New(t, pgfencetest.Options{NoInstall: true})
	admin := installShipped(t, db, 2)
	mustExec(t, admin, "GRANT USAGE ON SCHEMA fencegate TO "+db.App+"; GRANT EXECUTE ON FUNCTION fencegate.fence(text, bigint), fencegate.fence_many(text[], bigint) TO "+db.App+"; GRANT SELECT ON fencegate.marks TO "+db.App)
	app := db.AppConn(t)
	for r, tok := range map[string]int64{"a": 3, "b": 9} {
		if _, err := app.Exec(ctx, fencegate.FenceSQL, r, tok); err != nil {
			t.Fatal(err)
		}
	}
	st, err := pgfence.Inspect(ctx, admin)
	if err != nil || st.Version != 2 {
		t.Fatalf("Inspect on version 2: %+v, %v", st, err)
	}
	if _, err := pgfence.RequireSigned(ctx, admin, "c", keyring(t, keyOld)); !errors.Is(err, pgfence.ErrOldSchema) {
		t.Fatalf("require signed on version 2: %v", err)
	}
	rep, err := pgfence.Install(ctx, admin, pgfence.InstallOptions{OwnerRole: db.Owner, RequireInstalled: true})
	if err != nil {
		t.Fatal(err)
	}
	if rep.FromVersion != 2 || rep.ToVersion != pgfence.SchemaVersion || rep.Marks != 2 {
		t.Fatalf("upgrade report: %+v", rep)
	}
	if got := marks(t, admin); !sameMarks(got, map[string]int64{"a": 3, "b": 9}) {
		t.Fatalf("marks after upgrade: %v", got)
	}
	if got := health(t, admin); len(got) != 0 {
		t.Fatalf("health after upgrade: %v", got)
	}
	requireSigned(t, db, "c", keyring(t, keyOld))
	if _, err := app.Exec(ctx, fencegate.FenceSignedSQL, "b", int64(9), keyring(t, keyOld).Sign("c", "b", 9)); err != nil {
		t.Fatalf("signed fence after upgrade: %v", err)
	}
}

// TestMalformedProofFirstCall: a malformed proof is FG003 also as the first
// call of a session (PostgreSQL plans the first calls with the arguments as
// constants).
func TestMalformedProofFirstCall(t *testing.T) {
	db := pgfencetest.New(t)
	requireSigned(t, db, "c", keyring(t, keyOld))
	for _, p := range []string{"k2025.abc", "k2025." + strings.Repeat("g", 64), "k2025." + strings.Repeat("a", 65), ".", "k2025"} {
		_, err := db.AppConn(t).Exec(context.Background(), fencegate.FenceSignedSQL, "r", int64(1), p)
		wantRefused(t, err, fencegate.CodeMisuse, "is malformed")
	}
}

// require-signed writes the keys' pads as bound parameters in a transaction
// that switches statement logging off, so a database whose sessions log
// every statement with its parameters, and every plan, does not get the
// keys into the server log. The test reads the log the server writes (its
// log file, or its standard error when that is a file).
func TestRequireSignedKeepsKeysOutOfTheLog(t *testing.T) {
	ctx := context.Background()
	db := pgfencetest.New(t)
	admin := db.Admin(t)
	name := pgx.Identifier{dbName(t, db.DSN)}.Sanitize()
	for _, s := range []string{"log_statement = 'all'", "log_min_duration_statement = 0", "log_parameter_max_length = -1",
		"log_parameter_max_length_on_error = -1", "debug_print_plan = on"} {
		if _, err := admin.Exec(ctx, "ALTER DATABASE "+name+" SET "+s); err != nil {
			t.Fatal(err)
		}
	}
	var file string
	var size int64
	if err := admin.QueryRow(ctx, `SELECT f, (pg_stat_file(f)).size FROM coalesce(pg_current_logfile('stderr'), '/proc/self/fd/2') f`).Scan(&file, &size); err != nil {
		t.Fatalf("find the server log: %v", err)
	}
	keys := keyring(t, keyNew, keyOld)
	conn := db.Admin(t) // a new session: the database's settings apply
	var pid int32
	if err := conn.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		t.Fatal(err)
	}
	if _, err := pgfence.RequireSigned(ctx, conn, "cluster-log", keys); err != nil {
		t.Fatal(err)
	}
	var logged string
	if err := admin.QueryRow(ctx, "SELECT pg_read_file($1, $2, (pg_stat_file($1)).size - $2)", file, size).Scan(&logged); err != nil {
		t.Fatalf("read the server log: %v", err)
	}
	if !strings.Contains(logged, "SELECT pg_backend_pid()") {
		t.Fatalf("the server log %s shows no statement of the session (logging is not on?)", file)
	}
	for _, k := range keys.Keys() {
		inner, outer := k.Pads()
		for what, b := range map[string][]byte{"secret": k.Secret, "inner pad": inner[:], "outer pad": outer[:]} {
			h := hex.EncodeToString(b)[:32]
			if strings.Contains(strings.ToLower(logged), h) {
				t.Errorf("the server log holds the %s of key %s (%s...)", what, k.ID, h)
			}
		}
	}
	// What require-signed stored is what the fence verifies with.
	app := db.AppConn(t)
	if err := pgx.BeginFunc(ctx, app, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, fencegate.FenceSignedSQL, "acct:1", int64(5), keys.Sign("cluster-log", "acct:1", 5))
		return err
	}); err != nil {
		t.Fatalf("a signed fence after require-signed: %v", err)
	}
}

// A member of the owner role (not a superuser) may not switch statement
// logging off: it writes keys only where the server would not log them.
func TestRequireSignedRefusesWhereTheLogWouldHoldKeys(t *testing.T) {
	ctx := context.Background()
	db := pgfencetest.New(t)
	member := pgfencetest.Role(t, db.DSN, "fg_member_", "LOGIN")
	db.Exec(t, "GRANT "+db.Owner+" TO "+member)
	keys := keyring(t, keyNew)
	if _, err := pgfence.RequireSigned(ctx, pgfencetest.Connect(t, pgfencetest.WithUser(t, db.DSN, member)), "c-member", keys); err != nil {
		t.Fatalf("require-signed by a member of the owner role, statement logging off: %v", err)
	}
	db.Exec(t, "ALTER ROLE "+member+" SET log_statement = 'mod'")
	_, err := pgfence.RequireSigned(ctx, pgfencetest.Connect(t, pgfencetest.WithUser(t, db.DSN, member)), "c-other", keys)
	if !errors.Is(err, pgfence.ErrPrivilege) || !strings.Contains(err.Error(), "log_statement = mod") {
		t.Fatalf("require-signed by a member of the owner role, log_statement = mod: %v; want ErrPrivilege naming the setting", err)
	}
	st, err := pgfence.SigningStatus(ctx, db.Admin(t))
	if err != nil || st.ClusterID != "c-member" {
		t.Fatalf("signing after the refusal: %+v, %v; want the first cluster's keys kept", st, err)
	}
}
