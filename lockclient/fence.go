package lockclient

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// SQLSTATEs of the fencegate proxy (stable; PostgreSQL itself never emits
// class FG).
const (
	sqlstateStaleToken = "FG001" // a higher token was already accepted for the resource
	sqlstateUnfenced   = "FG002" // a write in a transaction that took no fence
	sqlstateMisuse     = "FG003" // a malformed or conflicting fence call
)

// FenceSQL is the statement a fenced transaction runs first, with the
// lock's resource and token. Through the fencegate proxy it takes the
// resource's fence row and rejects the transaction (SQLSTATE FG001) when a
// higher token was accepted before.
const FenceSQL = "SELECT fencegate.fence($1::text, $2::bigint)"

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
// failures.
func (l *Lock) Fence(ctx context.Context, tx pgx.Tx) error {
	if l.token == 0 {
		return ErrNoToken
	}
	if err := l.fenceExec(ctx, tx); err != nil {
		return fmt.Errorf("lockclient: fence %q with token %d: %w", l.resource, l.token, fenceError(err))
	}
	return nil
}

// fenceError adds the sentinel matching the proxy's SQLSTATE, keeping err
// (and the *pgconn.PgError in it) in the chain.
func fenceError(err error) error {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return err
	}
	switch pgErr.Code {
	case sqlstateStaleToken:
		if errors.Is(err, ErrStaleToken) {
			return err
		}
		return fmt.Errorf("%w: %w", ErrStaleToken, err)
	case sqlstateUnfenced:
		if errors.Is(err, ErrUnfenced) {
			return err
		}
		return fmt.Errorf("%w: %w", ErrUnfenced, err)
	case sqlstateMisuse:
		if errors.Is(err, ErrFenceMisuse) {
			return err
		}
		return fmt.Errorf("%w: %w", ErrFenceMisuse, err)
	}
	return err
}
