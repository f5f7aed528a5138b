package relay

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Effect is one effect as an operator sees it.
type Effect struct {
	ID        int64
	Resource  string
	Token     int64
	Target    string
	State     string // pending, delivered, failed, dropped
	Attempts  int
	Status    *int32 // the target's last HTTP status, if any
	LastError string
	Response  string
	Key       string // Idempotency-Key
	Created   time.Time
	NextAt    *time.Time // pending: when the next attempt is due (nil: now)
	Age       time.Duration
}

// ErrNoEffect is returned by Retry and Drop for an id that names no effect
// in a state the operation applies to.
var ErrNoEffect = errors.New("no such effect")

// List returns the effects in the given states (default pending and
// failed), oldest first, at most limit of them (0: 1000). conn must be a
// superuser or a member of the schema's owner role: the payloads stay out
// of it, but the effects table is the owner's.
func List(ctx context.Context, conn *pgx.Conn, states []string, limit int) ([]Effect, error) {
	if len(states) == 0 {
		states = []string{"pending", "failed"}
	}
	if limit <= 0 {
		limit = 1000
	}
	rows, err := conn.Query(ctx, `SELECT e.id, e.resource::pg_catalog.text, e.token, e.target::pg_catalog.text, e.state::pg_catalog.text, e.attempts, e.status,
		coalesce(e.last_error, ''), coalesce(e.response, ''), e.idem_key::pg_catalog.text, e.created_at, CASE WHEN pg_catalog.isfinite(e.next_at) THEN e.next_at END,
		EXTRACT(epoch FROM pg_catalog.clock_timestamp() OPERATOR(pg_catalog.-) e.created_at)::pg_catalog.float8
		FROM fencegate.effects e WHERE e.state OPERATOR(pg_catalog.=) ANY ($1::pg_catalog.text[])
		ORDER BY e.id LIMIT $2`, states, limit)
	if err != nil {
		return nil, fmt.Errorf("list effects: %w", err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Effect, error) {
		var e Effect
		var age float64
		err := r.Scan(&e.ID, &e.Resource, &e.Token, &e.Target, &e.State, &e.Attempts, &e.Status, &e.LastError, &e.Response, &e.Key, &e.Created, &e.NextAt, &age)
		e.Age = time.Duration(age * float64(time.Second))
		return e, err
	})
}

// Retry puts a failed effect back in the queue with a fresh count of
// attempts (Config.MaxAttempts), or makes a pending one due now, keeping its
// Idempotency-Key. A failed effect that becomes pending
// again is once more the head of its resource: later effects of the
// resource wait for it.
func Retry(ctx context.Context, conn *pgx.Conn, id int64) error {
	return settle(ctx, conn, id, `UPDATE fencegate.effects e SET state = 'pending', pending = true, next_at = '-infinity', done_at = NULL,
		attempts = CASE WHEN e.state OPERATOR(pg_catalog.=) 'failed' THEN 0 ELSE e.attempts END
		WHERE e.id OPERATOR(pg_catalog.=) $1 AND e.state OPERATOR(pg_catalog.=) ANY (ARRAY['pending', 'failed'])`)
}

// Drop gives up on a pending or failed effect: it will never be sent (a
// relay delivering it right now is refused: Drop fails and changes
// nothing). The reason, with who dropped it and when, is kept with the
// effect until retention prunes it.
func Drop(ctx context.Context, conn *pgx.Conn, id int64, reason string) error {
	if reason == "" {
		return errors.New("drop needs a reason")
	}
	return settle(ctx, conn, id, `UPDATE fencegate.effects e SET state = 'dropped', pending = false, done_at = pg_catalog.clock_timestamp(),
		last_error = pg_catalog.format('dropped by %s at %s: %s', session_user, pg_catalog.clock_timestamp(), $2::pg_catalog.text)
		WHERE e.id OPERATOR(pg_catalog.=) $1 AND e.state OPERATOR(pg_catalog.=) ANY (ARRAY['pending', 'failed'])`, reason)
}

func settle(ctx context.Context, conn *pgx.Conn, id int64, update string, args ...any) error {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	var state string
	err = tx.QueryRow(ctx, "SELECT e.state::pg_catalog.text FROM fencegate.effects e WHERE e.id OPERATOR(pg_catalog.=) $1 FOR UPDATE NOWAIT", id).Scan(&state)
	var pg *pgconn.PgError
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return fmt.Errorf("%w: effect %d", ErrNoEffect, id)
	case errors.As(err, &pg) && pg.Code == "55P03":
		return fmt.Errorf("effect %d is being delivered by a relay right now; try again in a moment", id)
	case err != nil:
		return err
	}
	tag, err := tx.Exec(ctx, update, append([]any{id}, args...)...)
	if err != nil {
		return err
	}
	if tag.RowsAffected() != 1 {
		return fmt.Errorf("%w: effect %d is %s; only pending and failed effects can be retried or dropped", ErrNoEffect, id, state)
	}
	return tx.Commit(ctx)
}
