package lockclient

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/internal/poll"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// SQLSTATEs of PostgreSQL after which InTx runs the transaction again.
const (
	sqlstateSerializationFailure = "40001"
	sqlstateDeadlockDetected     = "40P01"
)

// InTx runs fn in a fenced transaction on db, a connection to a database
// where the fencegate schema is installed (straight to PostgreSQL or through
// the fencegate proxy, as an application role): it begins, runs FenceSQL
// with the lock's resource and token before anything else, calls fn, and
// commits. On a *pgx.Conn, *pgxpool.Conn or *pgxpool.Pool, BEGIN and the
// fence go in one round trip, so that a fenced transaction costs the round
// trips of the same transaction unfenced. When fn or any step fails the transaction is rolled back and
// nothing of it is committed, with one exception said below
// (ErrCommitUnknown).
//
// The fence guards exactly the lock's resource, in exactly this
// transaction: fn may write the rows of protected tables that belong to
// that resource (their resource expression yields it); a write to a row of
// another resource is refused with ErrUnfenced. Writes to tables that are
// not protected are not checked at all.
//
// A stale token (another holder has taken the lock since and written with a
// higher token) yields an error matching ErrStaleToken, with PostgreSQL's
// *pgconn.PgError reachable through errors.As. InTx does not look at Done:
// the fence, checked by the database inside the transaction, is what keeps
// a holder that lost its lock from writing, even if it lost it a moment
// after any check it could make. Pass l.Context() (or a context derived from
// it) as ctx to also stop early once the lock is known lost.
//
// COMMIT (and ROLLBACK) are sent under a context of their own, bounded by
// WithCommitTimeout, not under ctx: once the fence holds the resource's row
// lock no other holder can write until this transaction ends, so finishing
// it after the lease ended is safe, while cancelling COMMIT midway would
// only leave its outcome unknown. If fn returned nil, InTx commits even if
// ctx has ended meanwhile.
//
// When the connection fails, or the commit timeout passes, while COMMIT is
// on its way, the transaction may or may not have committed: the error then
// matches ErrCommitUnknown, and only then. A COMMIT that PostgreSQL
// answered is reported as it answered. Running the work again under a new
// lock would do it twice if the first COMMIT did land: the new lock's token
// is newer, so the fence lets the retry through. Make the write idempotent
// instead: give the operation a key of its own (an order number, a request
// id) with a unique constraint, store the token in the row, and after
// ErrCommitUnknown look the key up (through a new connection, under a new
// lock) before doing anything again; a row carrying this lock's token says
// the first attempt committed. The package's examples show it.
//
// A serialization failure (SQLSTATE 40001, as a fence waiting behind a
// concurrent one gets under REPEATABLE READ or SERIALIZABLE), a deadlock
// (40P01) or a fence timeout (FG004: the fence waited longer than the
// database's fencegate.fence_timeout behind a transaction that holds the
// resource's mark) rolls the attempt back and runs the whole transaction
// again, fence and fn included, up to WithTxRetries times and only while
// the lease has time left; then the error matches ErrFenceTimeout when the
// last attempt timed out at the fence, else ErrSerialization. fn may therefore
// run more than once: it must do nothing outside tx that may not be
// repeated, and must not commit or roll back tx itself.
//
// A lock without a token (efficiency mode) is refused with ErrNoToken.
func (l *Lock) InTx(ctx context.Context, db Beginner, fn func(pgx.Tx) error) error {
	return lostCause(ctx, l.inTxRetried(ctx, db, fn))
}

// lostCause makes an error that ctx's end caused say why ctx ended when
// that was the loss of a lease (ctx is l.Context() or derived from it):
// the error then matches ErrLockLost as well as context.Canceled.
func lostCause(ctx context.Context, err error) error {
	if err == nil || ctx.Err() == nil || errors.Is(err, ErrLockLost) ||
		!(errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)) {
		return err
	}
	if cause := context.Cause(ctx); errors.Is(cause, ErrLockLost) {
		return fmt.Errorf("%w: %w", cause, err)
	}
	return err
}

func (l *Lock) inTxRetried(ctx context.Context, db Beginner, fn func(pgx.Tx) error) error {
	if l.token == 0 {
		return ErrNoToken
	}
	for attempt := 1; ; attempt++ {
		err := l.inTx(ctx, db, fn)
		if err == nil || !isRetryable(err) {
			return err
		}
		if attempt > l.c.opts.txRetries {
			return l.giveUp(attempt, "", err)
		}
		wait := jitter(min(time.Millisecond<<min(attempt-1, 6), 50*time.Millisecond))
		if left := l.left(); left <= wait {
			return l.giveUp(attempt, ", no lease left for another", err)
		}
		l.c.log.Debug("fenced transaction: retryable failure, running it again",
			"resource", l.resource, "token", l.token, "attempt", attempt, "err", err)
		if !poll.Sleep(ctx, wait) {
			return l.giveUp(attempt, "", errors.Join(err, ctx.Err()))
		}
	}
}

// giveUp is the error of InTx when it stops retrying after attempt
// attempts that failed with a retryable error, the last being err. A fence
// timeout already matches ErrFenceTimeout; the others are reported as
// ErrSerialization.
func (l *Lock) giveUp(attempt int, why string, err error) error {
	if errors.Is(err, ErrFenceTimeout) {
		return fmt.Errorf("lockclient: fenced transaction on %q after %s%s: %w", l.resource, attempts(attempt), why, err)
	}
	return fmt.Errorf("%w on %q after %s%s: %w", ErrSerialization, l.resource, attempts(attempt), why, err)
}

// inTx makes one attempt.
func (l *Lock) inTx(ctx context.Context, db Beginner, fn func(pgx.Tx) error) error {
	tx, err := l.beginFenced(ctx, db)
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		l.rollback(ctx, tx)
		return fenceError(err)
	}
	if err := sessionEnded(tx); err != nil {
		// PostgreSQL ended the session while fn ran (its FATAL waits
		// unread): COMMIT was never sent and nothing committed. Sent now,
		// COMMIT would read that FATAL as its answer, which during a COMMIT
		// means "unknown".
		return fmt.Errorf("lockclient: fenced transaction on %q: the session ended before COMMIT was sent; nothing committed: %w",
			l.resource, fenceError(err))
	}
	cctx, cancel := l.endContext(ctx)
	defer cancel()
	if err := tx.Commit(cctx); err != nil {
		return l.commitError(err)
	}
	return nil
}

// beginFenced begins a transaction on db and runs the fence as its first
// statement. On a *pgx.Conn, *pgxpool.Conn or *pgxpool.Pool, BEGIN and the
// fence leave in one batch, one round trip (pgx.Batch.BeginTx); on any other
// Beginner (a pgx.Tx, whose Begin is a savepoint, or a type of the caller's
// own) it begins, then fences. On error the transaction, if it began, is
// rolled back, and the connection goes back to its pool idle.
func (l *Lock) beginFenced(ctx context.Context, db Beginner) (pgx.Tx, error) {
	if s := l.batchSender(db); s != nil {
		return l.beginFencedBatch(ctx, s)
	}
	tx, err := db.Begin(ctx)
	if err != nil {
		return nil, l.beginError(err)
	}
	if err := l.Fence(ctx, tx); err != nil {
		l.rollback(ctx, tx)
		return nil, err
	}
	return tx, nil
}

// batchSender is what beginFencedBatch sends its batch through.
type batchSender interface {
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// batchSender returns db when it is one of pgx's own connections or pools,
// which keep a batch's transaction open after the batch (a Beginner of
// another type may release its connection when the batch closes), and nil
// otherwise. A signed token's proof must go as a bound parameter, never in
// the statement's text: on a connection whose default mode is the simple
// protocol, which writes parameters into the text, the fence goes on its
// own with QueryExecModeExec (fenceExec).
func (l *Lock) batchSender(db Beginner) batchSender {
	var cfg *pgx.ConnConfig
	switch d := db.(type) {
	case *pgxpool.Pool:
		if l.proof != "" {
			cfg = d.Config().ConnConfig
		}
	case *pgxpool.Conn:
		if l.proof != "" {
			cfg = d.Conn().Config()
		}
	case *pgx.Conn:
		if l.proof != "" {
			cfg = d.Config()
		}
	default:
		return nil
	}
	if cfg != nil && cfg.DefaultQueryExecMode == pgx.QueryExecModeSimpleProtocol {
		return nil
	}
	return db.(batchSender)
}

// beginFencedBatch sends BEGIN and the fence in one batch and reads both
// answers. The outcomes are those of BEGIN and Fence sent one after the
// other: a refused fence (FG001 ...) or a failure after BEGIN leaves a
// transaction that is rolled back here, a BEGIN that failed leaves none,
// and the errors are worded and matched as Begin's and Fence's.
func (l *Lock) beginFencedBatch(ctx context.Context, s batchSender) (pgx.Tx, error) {
	b := &pgx.Batch{QueuedQueries: make([]*pgx.QueuedQuery, 0, 2)}
	b.BeginTx(pgx.TxOptions{})
	if l.proof != "" {
		b.Queue(FenceSignedSQL, l.resource, l.token, l.proof)
	} else {
		b.Queue(FenceSQL, l.resource, l.token)
	}
	br := s.SendBatch(ctx, b)
	tx := br.Tx()
	_, beginErr := br.Exec()
	var fenceErr error
	if beginErr == nil {
		_, fenceErr = br.Exec()
	}
	if err := br.Close(); fenceErr == nil {
		fenceErr = err
	}
	switch {
	case tx == nil:
		return nil, l.beginError(errors.Join(beginErr, fenceErr, errors.New("the batch began no transaction")))
	case beginErr != nil:
		l.rollback(ctx, tx) // releases a pool's connection; the transaction is closed already
		return nil, l.beginError(beginErr)
	case fenceErr != nil:
		l.rollback(ctx, tx)
		return nil, l.fenceFailed(ctx, fenceErr)
	}
	return tx, nil
}

func (l *Lock) beginError(err error) error {
	return fmt.Errorf("lockclient: begin fenced transaction on %q: %w", l.resource, fenceError(err))
}

// endContext is the context of COMMIT and ROLLBACK: the caller's values,
// not its cancellation, and the commit timeout (see InTx).
func (l *Lock) endContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), l.c.opts.commitTimeout)
}

func (l *Lock) rollback(ctx context.Context, tx pgx.Tx) {
	rctx, cancel := l.endContext(ctx)
	_ = tx.Rollback(rctx)
	cancel()
}

// commitError tells a COMMIT that PostgreSQL answered (the transaction did
// not commit) from one whose outcome is unknown.
func (l *Lock) commitError(err error) error {
	var pgErr *pgconn.PgError
	switch {
	case errors.As(err, &pgErr) && connectionClass(pgErr.Code):
		// The session ended or its link broke while COMMIT was under way:
		// a server shutting down (57P01-57P03) or the gate that lost
		// PostgreSQL (08006) says nothing of what became of the COMMIT.
	case errors.As(err, &pgErr):
		return fmt.Errorf("lockclient: commit fenced transaction on %q: %w", l.resource, fenceError(err))
	case errors.Is(err, pgx.ErrTxCommitRollback):
		return fmt.Errorf("lockclient: commit fenced transaction on %q: a statement had failed, PostgreSQL rolled the transaction back: %w",
			l.resource, err)
	case errors.Is(err, pgx.ErrTxClosed):
		return fmt.Errorf("lockclient: commit fenced transaction on %q: fn ended the transaction itself; InTx commits it: %w",
			l.resource, err)
	case pgconn.SafeToRetry(err):
		// COMMIT never left, and pgx closed the connection: the server
		// rolls the transaction back.
		return fmt.Errorf("lockclient: commit fenced transaction on %q: COMMIT could not be sent, nothing committed: %w",
			l.resource, err)
	}
	return fmt.Errorf("%w: fenced transaction on %q with token %d: %w", ErrCommitUnknown, l.resource, l.token, err)
}

// sessionEnded returns the error that ended tx's session when the server
// has ended it (an unread message waits on the idle connection and reading
// it fails), else nil. It costs a non-blocking peek at the socket.
func sessionEnded(tx pgx.Tx) error {
	c := tx.Conn()
	if c == nil {
		return nil // a Tx of the caller's own making, without a connection to look at
	}
	pc := c.PgConn()
	if pc == nil || !pendingInput(pc.Conn()) {
		return nil
	}
	if err := pc.CheckConn(); err != nil {
		return err
	}
	if pc.IsClosed() {
		return errors.New("the connection is closed")
	}
	return nil
}

// connectionClass reports whether a SQLSTATE means that the session is
// over or its link broke, not that PostgreSQL refused a statement: class 08
// (connection exception; the fencegate gate sends 08006 when it loses
// PostgreSQL) and 57P01-57P03 (admin shutdown, crash shutdown, cannot
// connect now). During COMMIT such an error leaves the outcome unknown.
func connectionClass(code string) bool {
	return strings.HasPrefix(code, "08") || code == "57P01" || code == "57P02" || code == "57P03"
}

func attempts(n int) string {
	if n == 1 {
		return "1 attempt"
	}
	return fmt.Sprintf("%d attempts", n)
}

// isRetryable reports whether err is one after which the whole
// transaction may succeed when run again: a serialization failure, a
// deadlock, or a fence that timed out waiting for another transaction.
func isRetryable(err error) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return false
	}
	switch pgErr.Code {
	case sqlstateSerializationFailure, sqlstateDeadlockDetected, fencegate.CodeFenceTimeout:
		return true
	}
	return false
}

// left returns how much of the lease is left: 0 or less once it is over.
func (l *Lock) left() time.Duration {
	now := l.c.clk.now()
	l.checkAt(now)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.state != lockHeld {
		return 0
	}
	return l.validUntil - now
}
