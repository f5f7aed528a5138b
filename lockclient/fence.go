package lockclient

import (
	"context"
	"errors"
	"fmt"

	"github.com/fencegate/fencegate"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// FenceSQL is the statement a fenced transaction runs first, with the
// lock's resource and token: fencegate.FenceSQL. PostgreSQL check-and-advances
// the resource's mark, refuses the transaction (SQLSTATE FG001) when a higher
// token was accepted before, and from then on lets this transaction write
// the rows of protected tables that belong to the resource.
const FenceSQL = fencegate.FenceSQL

// Beginner begins a transaction: *pgx.Conn, *pgxpool.Pool and pgx.Tx (a
// savepoint) all do.
type Beginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// Fence runs FenceSQL with the lock's resource and token in tx (or
// FenceSignedSQL with its proof too, when the token service signed it), for callers
// that manage the transaction themselves; it must be the transaction's
// first statement. Errors map as in InTx. Such callers do what InTx does for
// them: commit under a context the lease does not cancel, treat a COMMIT
// whose connection failed as of unknown outcome, and retry serialization
// failures, deadlocks and fence timeouts (FG004).
func (l *Lock) Fence(ctx context.Context, tx pgx.Tx) error {
	if l.token == 0 {
		return ErrNoToken
	}
	if err := l.fenceExec(ctx, tx); err != nil {
		return l.fenceFailed(ctx, err)
	}
	return nil
}

// fenceFailed is the error of a fence that failed with err.
func (l *Lock) fenceFailed(ctx context.Context, err error) error {
	return lostCause(ctx, fmt.Errorf("lockclient: fence %q with token %d: %w", l.resource, l.token, fenceError(err)))
}

// fenceSentinels maps each fencegate SQLSTATE to the error it matches.
var fenceSentinels = map[string]error{
	fencegate.CodeStaleToken:     ErrStaleToken,
	fencegate.CodeUnfenced:       ErrUnfenced,
	fencegate.CodeMisuse:         ErrFenceMisuse,
	fencegate.CodeFenceTimeout:   ErrFenceTimeout,
	fencegate.CodeSchemaInvalid:  ErrSchemaInvalid,
	fencegate.CodeProtectedDDL:   ErrProtectedDDL,
	fencegate.CodePrivilegedRole: ErrPrivilegedRole,
	fencegate.CodeBadProof:       ErrBadProof,
}

// fenceError adds the sentinel matching a fencegate SQLSTATE, keeping err
// (and the *pgconn.PgError in it) in the chain.
func fenceError(err error) error {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return err
	}
	sentinel, ok := fenceSentinels[pgErr.Code]
	if !ok || errors.Is(err, sentinel) {
		return err
	}
	return fmt.Errorf("%w: %w", sentinel, err)
}
