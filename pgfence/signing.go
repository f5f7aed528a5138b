package pgfence

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/fencegate/fencegate/tokensign"
	"github.com/jackc/pgx/v5"
)

// ErrOldSchema: the installed schema predates what the operation needs;
// "fencegate schema upgrade" brings it up to date.
var ErrOldSchema = errors.New("pgfence: schema fencegate is of an older version")

// Signing says whether a database requires signed tokens, and with what.
type Signing struct {
	Required  bool
	ClusterID string   // the token service cluster whose proofs verify
	KeyIDs    []string // in the key file's order, the signing key first
}

// RequireSigned makes the database require signed tokens from then on:
// it stores the cluster id and the keys (as their HMAC pads) in
// fencegate.signing_keys, which only the owner role reads, replacing what
// was there, in one transaction. From its commit, fencegate.fence(resource,
// token) and fence_many refuse with FG003 and fencegate.fence(resource,
// token, proof) verifies the proof before anything advances (FG008 when it
// does not verify). Keep the old keys listed after a rotation until no
// token they signed is in use. It returns what was required before.
//
// It needs a superuser or a member of the owner role, and schema version 3.
func RequireSigned(ctx context.Context, conn *pgx.Conn, clusterID string, keys *tokensign.Keyring) (before *Signing, err error) {
	if strings.TrimSpace(clusterID) == "" {
		return nil, fmt.Errorf("%w: the cluster id is empty; give the token service's cluster id (fencegate token status shows it)", ErrBadInput)
	}
	if keys == nil || len(keys.Keys()) == 0 {
		return nil, fmt.Errorf("%w: no signing keys", ErrBadInput)
	}
	return setSigning(ctx, conn, func(tx pgx.Tx) error {
		prefix := signingPrefix(clusterID)
		for i, k := range keys.Keys() {
			inner, outer := k.Pads()
			// Bound parameters over the extended protocol, whatever the
			// connection's default mode: the statement text holds no key.
			if _, err := tx.Exec(ctx, `INSERT INTO fencegate.signing_keys (key_id, cluster_id, message_prefix, inner_pad, outer_pad, position)
				VALUES ($1, $2, $3, $4, $5, $6)`, pgx.QueryExecModeDescribeExec, k.ID, clusterID, prefix, inner[:], outer[:], i); err != nil {
				return fmt.Errorf("store key %s: %w", k.ID, classify(err))
			}
		}
		return nil
	})
}

// AllowUnsigned undoes RequireSigned: it deletes every signing key, so
// that the two-argument fence works again and proofs are no longer
// verified. It returns what was required before.
func AllowUnsigned(ctx context.Context, conn *pgx.Conn) (before *Signing, err error) {
	return setSigning(ctx, conn, func(pgx.Tx) error { return nil })
}

// signingPrefix is the fixed start of every message signed for clusterID.
func signingPrefix(clusterID string) []byte {
	m := tokensign.Message(clusterID, "", 0)
	return m[:len(m)-4-8] // drop the empty resource's length and the token
}

// quietSettings are the settings under which require-signed writes keys:
// with these values no statement's parameters, nor a plan holding their
// values, reach the server log. Each is set for the writing transaction
// only. The log_ settings (but log_parameter_max_length_on_error) need a
// superuser or a role granted SET on them (PostgreSQL 15: GRANT SET ON
// PARAMETER); the others any role, and a database's owner can turn them on
// for every session (ALTER DATABASE ... SET debug_print_plan = on).
var quietSettings = []struct{ name, value string }{
	{"log_statement", "none"},
	{"log_min_duration_statement", "-1"},
	{"log_min_duration_sample", "-1"},
	{"log_transaction_sample_rate", "0"},
	{"log_parameter_max_length", "0"},
	{"log_parameter_max_length_on_error", "0"},
	{"debug_print_parse", "off"},
	{"debug_print_rewritten", "off"},
	{"debug_print_plan", "off"},
}

// quietSQL is true when, under the transaction's settings, a statement's
// parameters cannot reach the server log: no statement is logged (log_statement
// none or ddl, no duration or sampled logging), or it is logged without its
// parameters; and neither errors nor plans log them.
const quietSQL = `SELECT ((pg_catalog.current_setting('log_statement') IN ('none', 'ddl')
	AND pg_catalog.current_setting('log_min_duration_statement') = '-1'
	AND pg_catalog.current_setting('log_min_duration_sample') = '-1'
	AND pg_catalog.current_setting('log_transaction_sample_rate') = '0')
	OR pg_catalog.current_setting('log_parameter_max_length') = '0')
	AND pg_catalog.current_setting('log_parameter_max_length_on_error') = '0'
	AND NOT pg_catalog.current_setting('debug_print_parse')::pg_catalog.bool
	AND NOT pg_catalog.current_setting('debug_print_rewritten')::pg_catalog.bool
	AND NOT pg_catalog.current_setting('debug_print_plan')::pg_catalog.bool`

// quiet switches statement logging off for the rest of tx, as far as the
// role may. When what it may not change would still log the keys, the keys
// are not written (ErrPrivilege).
func quiet(ctx context.Context, tx pgx.Tx) error {
	server, err := ReadServerVersion(ctx, tx)
	if err != nil {
		return err
	}
	// Who may set a parameter: GRANT SET ON PARAMETER and
	// has_parameter_privilege came with PostgreSQL 15; before, a
	// superuser-context parameter is a superuser's alone.
	canSetSQL := `pg_catalog.has_parameter_privilege($1::pg_catalog.text, 'SET')`
	if server.Major() < 15 {
		canSetSQL = `(SELECT r.rolsuper FROM pg_catalog.pg_roles r WHERE r.rolname OPERATOR(pg_catalog.=) current_user)`
	}
	for _, q := range quietSettings {
		var cur string
		var canSet bool
		if err := tx.QueryRow(ctx, `SELECT pg_catalog.current_setting($1::pg_catalog.text),
			`+canSetSQL+`
			OR EXISTS (SELECT 1 FROM pg_catalog.pg_settings s WHERE s.name = $1::pg_catalog.text AND s.context = 'user')`,
			q.name).Scan(&cur, &canSet); err != nil {
			return fmt.Errorf("read %s: %w", q.name, classify(err))
		}
		if cur == q.value || !canSet {
			continue
		}
		if _, err := tx.Exec(ctx, "SELECT pg_catalog.set_config($1::pg_catalog.text, $2::pg_catalog.text, true)", q.name, q.value); err != nil {
			return fmt.Errorf("set %s: %w", q.name, classify(err))
		}
	}
	var ok bool
	if err := tx.QueryRow(ctx, quietSQL).Scan(&ok); err != nil {
		return fmt.Errorf("read the logging settings: %w", classify(err))
	}
	if !ok {
		var loud []string
		for _, q := range quietSettings {
			var cur string
			if err := tx.QueryRow(ctx, "SELECT pg_catalog.current_setting($1::pg_catalog.text)", q.name).Scan(&cur); err == nil && cur != q.value {
				loud = append(loud, q.name+" = "+cur)
			}
		}
		return fmt.Errorf("%w: the server would log the signing keys (%s), and this role may not switch that off for its transaction; run it as a superuser", ErrPrivilege, strings.Join(loud, ", "))
	}
	return nil
}

func setSigning(ctx context.Context, conn *pgx.Conn, fill func(pgx.Tx) error) (*Signing, error) {
	tx, err := beginAdmin(ctx, conn)
	if err != nil {
		return nil, fmt.Errorf("set signing keys: %w", err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // a no-op after Commit
	before, err := fillSigning(ctx, tx, fill)
	if err != nil {
		tx.Rollback(ctx) //nolint:errcheck // the error that matters is err
		return nil, lockTimedOut(ctx, conn, "set signing keys", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, fmt.Errorf("set signing keys: commit: %w", classify(err))
	}
	return before, nil
}

// fillSigning is setSigning inside its transaction.
func fillSigning(ctx context.Context, tx pgx.Tx, fill func(pgx.Tx) error) (*Signing, error) {
	if err := quiet(ctx, tx); err != nil {
		return nil, fmt.Errorf("set signing keys: %w", err)
	}
	if err := limitLockWaits(ctx, tx); err != nil {
		return nil, fmt.Errorf("set signing keys: %w", err)
	}
	var owner, table *string
	if err := tx.QueryRow(ctx, `SELECT n.nspowner::pg_catalog.regrole::pg_catalog.text, pg_catalog.to_regclass('fencegate.signing_keys')::pg_catalog.text
		FROM (SELECT 1) one LEFT JOIN pg_catalog.pg_namespace n ON n.nspname = 'fencegate'`).Scan(&owner, &table); err != nil {
		return nil, fmt.Errorf("set signing keys: %w", classify(err))
	}
	switch {
	case owner == nil:
		return nil, ErrNotInstalled
	case table == nil:
		return nil, fmt.Errorf("%w: it has no signing keys table (version 3); run \"fencegate schema upgrade --db DSN\" first", ErrOldSchema)
	}
	var ok bool
	if err := tx.QueryRow(ctx, "SELECT pg_catalog.pg_has_role(current_user, $1::pg_catalog.text::pg_catalog.regrole, 'MEMBER')", *owner).Scan(&ok); err != nil {
		return nil, fmt.Errorf("set signing keys: %w", classify(err))
	}
	if !ok {
		return nil, fmt.Errorf("%w: setting signing keys needs a superuser or a member of the owner role %s", ErrPrivilege, *owner)
	}
	if _, err := tx.Exec(ctx, "SET LOCAL ROLE "+ident(*owner)); err != nil {
		return nil, fmt.Errorf("set signing keys: become the owner role: %w", classify(err))
	}
	// Under the installers' lock: no install runs meanwhile.
	if err := lockInstall(ctx, tx); err != nil {
		return nil, fmt.Errorf("set signing keys: %w", err)
	}
	before, err := readSigning(ctx, tx)
	if err != nil {
		return nil, err
	}
	if _, err := tx.Exec(ctx, "DELETE FROM fencegate.signing_keys"); err != nil {
		return nil, fmt.Errorf("set signing keys: %w", classify(err))
	}
	if err := fill(tx); err != nil {
		return nil, fmt.Errorf("set signing keys: %w", err)
	}
	return before, nil
}

type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

func readSigning(ctx context.Context, q querier) (*Signing, error) {
	rows, err := q.Query(ctx, "SELECT key_id, cluster_id FROM fencegate.signing_keys ORDER BY position, key_id")
	if err != nil {
		return nil, fmt.Errorf("read signing keys: %w", classify(err))
	}
	s := &Signing{}
	for rows.Next() {
		var id, cid string
		if err := rows.Scan(&id, &cid); err != nil {
			return nil, fmt.Errorf("read signing keys: %w", err)
		}
		s.Required, s.ClusterID = true, cid
		s.KeyIDs = append(s.KeyIDs, id)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read signing keys: %w", classify(err))
	}
	return s, nil
}

// SigningStatus reads whether the database requires signed tokens. Reading
// the key table needs a superuser or a member of the owner role
// (ErrPrivilege otherwise).
func SigningStatus(ctx context.Context, conn *pgx.Conn) (*Signing, error) {
	s := &Signing{}
	err := adminTx(ctx, conn, func(tx pgx.Tx) error {
		var table *string
		if err := tx.QueryRow(ctx, "SELECT pg_catalog.to_regclass('fencegate.signing_keys')::pg_catalog.text").Scan(&table); err != nil {
			return fmt.Errorf("read signing keys: %w", classify(err))
		}
		if table == nil {
			return nil
		}
		var err error
		s, err = readSigning(ctx, tx)
		return err
	})
	if err != nil {
		return nil, err
	}
	return s, nil
}
