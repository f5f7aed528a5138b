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
			if _, err := tx.Exec(ctx, `INSERT INTO fencegate.signing_keys (key_id, cluster_id, message_prefix, inner_pad, outer_pad, position)
				VALUES ($1, $2, $3, $4, $5, $6)`, k.ID, clusterID, prefix, inner[:], outer[:], i); err != nil {
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

func setSigning(ctx context.Context, conn *pgx.Conn, fill func(pgx.Tx) error) (*Signing, error) {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("set signing keys: %w", err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // a no-op after Commit
	var owner, table *string
	if err := tx.QueryRow(ctx, `SELECT n.nspowner::regrole::text, to_regclass('fencegate.signing_keys')::text
		FROM (SELECT 1) one LEFT JOIN pg_namespace n ON n.nspname = 'fencegate'`).Scan(&owner, &table); err != nil {
		return nil, fmt.Errorf("set signing keys: %w", classify(err))
	}
	switch {
	case owner == nil:
		return nil, ErrNotInstalled
	case table == nil:
		return nil, fmt.Errorf("%w: it has no signing keys table (version 3); run \"fencegate schema upgrade --db DSN\" first", ErrOldSchema)
	}
	var ok bool
	if err := tx.QueryRow(ctx, "SELECT pg_has_role(current_user, $1::text::regrole, 'MEMBER')", *owner).Scan(&ok); err != nil {
		return nil, fmt.Errorf("set signing keys: %w", classify(err))
	}
	if !ok {
		return nil, fmt.Errorf("%w: setting signing keys needs a superuser or a member of the owner role %s", ErrPrivilege, *owner)
	}
	if _, err := tx.Exec(ctx, "SET LOCAL ROLE "+ident(*owner)); err != nil {
		return nil, fmt.Errorf("set signing keys: become the owner role: %w", classify(err))
	}
	before, err := readSigning(ctx, tx)
	if err != nil {
		return nil, err
	}
	// Under the marks' advisory lock of Install: no install runs meanwhile.
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", installLockKey); err != nil {
		return nil, fmt.Errorf("set signing keys: %w", classify(err))
	}
	if _, err := tx.Exec(ctx, "DELETE FROM fencegate.signing_keys"); err != nil {
		return nil, fmt.Errorf("set signing keys: %w", classify(err))
	}
	if err := fill(tx); err != nil {
		return nil, fmt.Errorf("set signing keys: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, fmt.Errorf("set signing keys: commit: %w", classify(err))
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
	var table *string
	if err := conn.QueryRow(ctx, "SELECT to_regclass('fencegate.signing_keys')::text").Scan(&table); err != nil {
		return nil, fmt.Errorf("read signing keys: %w", classify(err))
	}
	if table == nil {
		return &Signing{}, nil
	}
	return readSigning(ctx, conn)
}
