package pgfence

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// Admin sessions never run application code.
//
// Install, upgrade, the proxy's repair, protect, the marks commands,
// require-signed and status run as an administrator in a database that
// application roles can shape: a role with CREATE on schema public can add
// functions, operators and types there, and the database's owner can set
// the database's search_path (ALTER DATABASE ... SET search_path = public,
// pg_catalog). PostgreSQL resolves an unqualified function by the best
// match of its argument types over every schema of the path, so a
// public.has_database_privilege(name, text) beats the built-in (text, text)
// for a name argument, wherever pg_catalog stands in the path.
//
// So every admin transaction starts with SET LOCAL search_path =
// pg_catalog, pg_temp (adminSearchPath), and every session the command line
// opens with SET search_path (AdminSession). Under that path:
//
//   - functions and operators resolve in pg_catalog only: pg_temp is never
//     searched for them, and no other schema is in the path; nobody but a
//     superuser can create objects in pg_catalog;
//   - relations and types resolve in pg_catalog first, then in the session's
//     own pg_temp, which holds what this very session created;
//   - casts between built-in types cannot be added by an application: CREATE
//     CAST needs the ownership of the source or the target type.
//
// On top of that the statements the package sends name functions and types
// with their schema (pg_catalog.format, ::pg_catalog.regclass), so that a
// statement copied elsewhere keeps its meaning. Operators are left bare in
// statements that only admin transactions send: all their operands are
// catalog columns or parameters of built-in types, which, under the pinned
// path, only pg_catalog's operators match. The queries exported to run on
// any session (HealthQuery, PrivilegeQuery, InventoryQuery) qualify their
// operators too. The statements
// of sql/schema.sql run under the same pinned path, and the functions it
// creates pin their own.
const adminSearchPath = "pg_catalog, pg_temp"

// PinnedSettings are the settings, with their values as SQL, under which
// the catalog queries (HealthQuery, PrivilegeQuery, InventoryQuery) and
// every admin transaction run, whatever the session chose (startup options,
// ALTER ROLE or ALTER DATABASE ... SET, a SET of its own). The inventory
// compares definitions as PostgreSQL prints them (pg_get_constraintdef,
// pg_get_expr, format('%I'), regclass), and these settings change what it
// prints: quote_all_identifiers quotes every name; DateStyle and
// IntervalStyle how date and interval constants print; extra_float_digits
// floats; bytea_output byte strings; standard_conforming_strings whether a
// string constant with a backslash prints as E'...'; xmloption and
// xmlbinary XML; transform_null_equals and array_nulls how the query's own
// text is read. search_path is pinned for what it resolves (see
// adminSearchPath). Every one of them can be set by any role
// (PGC_USERSET), so SET LOCAL works on any session.
//
// Left out, for their cost (setting them took several milliseconds in a
// new backend, which the gate pays at every checked session): TimeZone
// (timestamptz constants), lc_monetary (money), lc_numeric and lc_time
// (to_char). No item of the expected inventory holds such a constant or
// call, so they cannot make a sound schema look altered; and a planted item
// is reported whatever they make it print, since nothing it could print
// under them matches an expected item. A schema version that adds such a
// constant must pin them too (TestGatePinsTheClientsOutputSettings connects
// with each).
var PinnedSettings = [][2]string{
	{"search_path", adminSearchPath},
	{"quote_all_identifiers", "off"},
	{"DateStyle", "'ISO, MDY'"},
	{"IntervalStyle", "postgres"},
	{"extra_float_digits", "1"},
	{"bytea_output", "hex"},
	{"standard_conforming_strings", "on"},
	{"xmloption", "content"},
	{"xmlbinary", "base64"},
	{"transform_null_equals", "off"},
	{"array_nulls", "on"},
	// Not an output setting: the catalog queries (the admission check's
	// closure of called functions above all) can cross jit_above_cost on
	// a database with many functions, where compiling them costs hundreds
	// of milliseconds the answer does not need.
	{"jit", "off"},
}

// PinSQL returns the statements that pin PinnedSettings, separated by
// semicolons (no trailing one): SET LOCAL when local, else SET.
func PinSQL(local bool) string {
	set := "SET "
	if local {
		set = "SET LOCAL "
	}
	var b strings.Builder
	for i, p := range PinnedSettings {
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(set + p[0] + " = " + p[1])
	}
	return b.String()
}

// RepairLockTimeout bounds each lock wait of an install, upgrade or repair
// (lock_timeout). A repair needs strong locks on the marks and on protected
// tables; a lock request waiting in the queue blocks every later request
// that conflicts with it, fences included, so the request must not wait
// for long behind an application's open transaction: it gives up instead,
// and the error names the sessions that held the locks.
const RepairLockTimeout = 2 * time.Second

// AdminSession pins conn's search_path to pg_catalog, pg_temp for the rest
// of the session, so that no statement sent on it afterwards resolves a
// name to an application's function, operator or type, and the other
// PinnedSettings, so that what PostgreSQL prints is what the inventory
// expects whatever the database's or role's defaults. Every admin command
// calls it right after connecting; the package's own transactions pin the
// path again with SET LOCAL, so they are safe on any connection.
func AdminSession(ctx context.Context, conn *pgx.Conn) error {
	if _, err := conn.Exec(ctx, PinSQL(false)); err != nil {
		return fmt.Errorf("pin the admin session's search_path and settings: %w", classify(err))
	}
	return nil
}

// beginAdmin begins a transaction on conn whose first statement pins the
// search_path and the other PinnedSettings.
func beginAdmin(ctx context.Context, conn *pgx.Conn) (pgx.Tx, error) {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return nil, err
	}
	if _, err := tx.Exec(ctx, PinSQL(true)); err != nil {
		tx.Rollback(ctx) //nolint:errcheck // the error that matters is err
		return nil, fmt.Errorf("pin the search_path and settings: %w", classify(err))
	}
	return tx, nil
}

// adminTx runs fn in a transaction begun by beginAdmin and commits it.
func adminTx(ctx context.Context, conn *pgx.Conn, fn func(pgx.Tx) error) error {
	tx, err := beginAdmin(ctx, conn)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx) //nolint:errcheck // a no-op after Commit
	if err := fn(tx); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("commit: %w", classify(err))
	}
	return nil
}

// limitLockWaits sets RepairLockTimeout as the transaction's lock_timeout.
func limitLockWaits(ctx context.Context, tx pgx.Tx) error {
	_, err := tx.Exec(ctx, fmt.Sprintf("SET LOCAL lock_timeout = '%dms'", RepairLockTimeout.Milliseconds()))
	if err != nil {
		return fmt.Errorf("set lock_timeout: %w", classify(err))
	}
	return nil
}

// lockInstall takes the installers' lock: SHARE UPDATE EXCLUSIVE on
// fencegate.marks. It conflicts with itself, so installs, upgrades, repairs
// and require-signed run one at a time, and not with what fences take (ROW
// EXCLUSIVE, row locks) nor with readers of the marks (ACCESS SHARE), so
// holding it stops no fence. LOCK TABLE in that mode needs UPDATE, DELETE or
// TRUNCATE on the table, which only the owner role holds (applications have
// SELECT), and nothing else an application may do on the marks takes it.
// (An advisory lock, the earlier choice, can be taken by any role on any
// key, and so held by an application to stop every repair.)
//
// Before the first install there is no table to lock: two first installs at
// once both create schema fencegate, and the later one fails on the
// catalog's unique name (it waits for the first to commit, then reports
// the duplicate) and is simply run again. A marks table owned by somebody
// else (the version 1 schema, owned by the application role) is locked all
// the same: its owner could hold any lock on it, and RepairLockTimeout
// bounds the wait.
func lockInstall(ctx context.Context, tx pgx.Tx) error {
	var kind *string
	if err := tx.QueryRow(ctx, `SELECT c.relkind::pg_catalog.text FROM pg_catalog.pg_class c
		WHERE c.oid = pg_catalog.to_regclass('fencegate.marks')`).Scan(&kind); err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("find the marks: %w", classify(err))
	}
	if kind == nil || *kind != "r" {
		return nil
	}
	if _, err := tx.Exec(ctx, "LOCK TABLE ONLY fencegate.marks IN SHARE UPDATE EXCLUSIVE MODE"); err != nil {
		return fmt.Errorf("take the installers' lock on fencegate.marks: %w", classify(err))
	}
	return nil
}

// lockHoldersSQL lists the other sessions that hold locks on a relation of
// schema fencegate or on a protected table of this database (a table whose
// trigger calls fencegate.check_insert() itself, found by identity as in
// protectedRootsByIdentitySQL; not one with a trigger merely named like
// fencegate's): those a repair waits for.
const lockHoldersSQL = `SELECT a.pid, coalesce(a.usename::pg_catalog.text, ''), coalesce(a.application_name, ''),
	coalesce(pg_catalog.to_char(a.xact_start, 'YYYY-MM-DD"T"HH24:MI:SSOF'), ''), coalesce(a.state, ''),
	pg_catalog.string_agg(DISTINCT l.mode || ' on ' || l.relation::pg_catalog.regclass::pg_catalog.text, ', ')
	FROM pg_catalog.pg_locks l JOIN pg_catalog.pg_stat_activity a ON a.pid = l.pid
	WHERE l.granted AND l.pid <> pg_catalog.pg_backend_pid()
	  AND l.database = (SELECT d.oid FROM pg_catalog.pg_database d WHERE d.datname = pg_catalog.current_database())
	  AND (l.relation IN (SELECT c.oid FROM pg_catalog.pg_class c WHERE c.relnamespace = pg_catalog.to_regnamespace('fencegate'))
	    OR l.relation IN (SELECT t.tgrelid FROM pg_catalog.pg_trigger t WHERE t.tgfoid = ` + checkInsertOIDSQL + `))
	GROUP BY 1, 2, 3, 4, 5 ORDER BY 4, 1`

// lockTimedOut turns err, when it is a lock_timeout (SQLSTATE 55P03) of a
// transaction of conn that has been rolled back, into ErrLocked naming the
// sessions that hold locks on fencegate's tables or protected tables now.
// Any other error is returned as it is.
func lockTimedOut(ctx context.Context, conn *pgx.Conn, what string, err error) error {
	if pgCode(err) != "55P03" {
		return err
	}
	var holders []string
	qerr := adminTx(ctx, conn, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, lockHoldersSQL)
		if err != nil {
			return err
		}
		holders, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (string, error) {
			var pid int32
			var user, app, since, state, locks string
			if err := r.Scan(&pid, &user, &app, &since, &state, &locks); err != nil {
				return "", err
			}
			return fmt.Sprintf("pid %d (user %s, application_name %q, transaction started %s, state %s, holding %s)",
				pid, orUnknown(user), app, orUnknown(since), orUnknown(state), locks), nil
		})
		return err
	})
	who := "no session holds one any more"
	switch {
	case qerr != nil:
		who = "the sessions holding them could not be listed: " + qerr.Error()
	case len(holders) > 0:
		who = "held by " + strings.Join(holders, "; ")
	}
	return fmt.Errorf("%w: %s waited %s for a lock and gave up (so as not to hold up every fence behind it); %s: %w",
		ErrLocked, what, RepairLockTimeout, who, err)
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}
