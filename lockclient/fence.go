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

// InTx runs fn in a fenced transaction on db, which must reach PostgreSQL
// through the fencegate proxy: it begins, runs FenceSQL with the lock's
// resource and token before anything else, calls fn, and commits. When fn
// or any step fails the transaction is rolled back and nothing of it is
// committed.
//
// A stale token (another holder has taken the lock since and written with a
// higher token) yields an error matching ErrStaleToken, with the proxy's
// *pgconn.PgError reachable through errors.As. InTx does not look at Done:
// the fence, checked by the database inside the transaction, is what keeps
// a holder that lost its lock from writing, even if it lost it a moment
// after any check it could make. Pass l.Context() (or a context derived from
// it) as ctx to also stop early once the lock is known lost.
//
// A lock without a token (efficiency mode) is refused with ErrNoToken.
func (l *Lock) InTx(ctx context.Context, db Beginner, fn func(pgx.Tx) error) (err error) {
	if l.token == 0 {
		return ErrNoToken
	}
	tx, err := db.Begin(ctx)
	if err != nil {
		return fmt.Errorf("lockclient: begin fenced transaction on %q: %w", l.resource, fenceError(err))
	}
	committed := false
	defer func() {
		if !committed {
			_ = tx.Rollback(context.WithoutCancel(ctx))
		}
	}()
	if err := l.Fence(ctx, tx); err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		return fenceError(err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("lockclient: commit fenced transaction on %q: %w", l.resource, fenceError(err))
	}
	committed = true
	return nil
}

// Fence runs FenceSQL with the lock's resource and token in tx, for callers
// that manage the transaction themselves; it must be the transaction's
// first statement. Errors map as in InTx.
func (l *Lock) Fence(ctx context.Context, tx pgx.Tx) error {
	if l.token == 0 {
		return ErrNoToken
	}
	if _, err := tx.Exec(ctx, FenceSQL, l.resource, l.token); err != nil {
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
