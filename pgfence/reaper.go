package pgfence

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// The reaper ends fence holders that stall: sessions idle in a
// transaction that holds a fence for longer than a limit. Through the proxy
// its --idle-in-transaction-timeout does that, and no session can switch it
// off. Straight to PostgreSQL a session may SET
// idle_in_transaction_session_timeout = 0, and its fence's row lock then
// stays until an operator acts: every later holder of that resource waits,
// then fails with FG004.
//
// The reaper needs a role with pg_signal_backend and nothing more (it
// cannot end a superuser's session; application roles are not superusers).
// Such a role sees, for another role's session, its pid, its user and its
// locks (pg_locks), but not its state nor when that state began:
// pg_stat_activity hides them from a role that is neither a member of the
// session's role nor of pg_read_all_stats (which would show every
// session's statement text). Nothing else it can see tells a session idle
// in its transaction from one running a statement (backend_xmin does not:
// a client on the extended protocol keeps a snapshot between statements,
// in its unnamed portal). So the reaper judges what it can see:
//
//   - A fence holder is a session holding a lock stronger than ACCESS
//     SHARE on fencegate.marks (a fence takes ROW EXCLUSIVE), in a given
//     transaction (pg_locks.virtualtransaction).
//   - Where it can see the holder's state (a superuser, a member of
//     pg_read_all_stats or of the holder's role), it ends a holder that has
//     been idle in its transaction for longer than the limit, by the
//     server's own state_change.
//   - Where it cannot, it ends a transaction that has held a fence for
//     longer than the limit, idle or not: from the first pass that saw
//     that transaction hold it, every pass since having seen it still
//     holding it. Choose the limit above the longest fenced transaction
//     you run: the lease of the lock it fences for is a natural one, since
//     past it the holder's token is stale anyway. Run passes every quarter
//     of the limit, so a holder is ended between one limit and one limit
//     and a quarter after the pass that first saw it.
//
// Ending is pg_terminate_backend, in a statement that checks again that the
// same transaction still holds the fence (and, where visible, is still
// idle). PostgreSQL rolls the transaction back, and its fence's lock goes
// with it.

// Reaped is one session the reaper ended.
type Reaped struct {
	PID         int    // the session's process id
	Role        string // its user
	Application string // its application_name ("" when hidden)
	// For is how long it had been idle in its transaction (Idle true: the
	// reaper could see its state) or, where the reaper could not see it,
	// how long its transaction had held a fence as far as the reaper saw.
	For  time.Duration
	Idle bool
}

// Reaper ends sessions whose transaction holds a fence and has been idle
// (where the reaper can see states) or has held it (where it cannot) for
// longer than Limit, in the database it is given a connection to. Keep
// one Reaper per database and call Pass repeatedly (or Run): it remembers
// what earlier passes saw.
type Reaper struct {
	Limit time.Duration
	// heldSince is when a pass first saw each fence-holding transaction
	// (pid and virtual transaction id) whose state the reaper cannot see.
	heldSince map[reapKey]time.Time
}

type reapKey struct {
	pid  int32
	vxid string
}

// reapHoldersSQL lists the sessions other than this one holding a lock
// stronger than ACCESS SHARE on fencegate.marks of this database: pid,
// virtual transaction, user, application_name, whether the reaper can see
// its state, whether it is idle in its transaction, and for how long it has
// been in that state (seconds; both where visible).
const reapHoldersSQL = `SELECT DISTINCT l.pid, l.virtualtransaction, coalesce(a.usename::pg_catalog.text, ''), coalesce(a.application_name, ''),
	a.state IS NOT NULL,
	coalesce(a.state LIKE 'idle in transaction%', false),
	coalesce(pg_catalog.date_part('epoch', pg_catalog.clock_timestamp() - a.state_change), 0)
	FROM pg_catalog.pg_locks l JOIN pg_catalog.pg_stat_activity a ON a.pid = l.pid
	WHERE l.locktype = 'relation' AND l.granted AND l.mode <> 'AccessShareLock'
	  AND l.database = (SELECT d.oid FROM pg_catalog.pg_database d WHERE d.datname = pg_catalog.current_database())
	  AND l.relation = (SELECT c.oid FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
	                    WHERE n.nspname = 'fencegate' AND c.relname = 'marks')
	  AND l.pid <> pg_catalog.pg_backend_pid()`

// reapSQL ends session $1 if its transaction $2 still holds a fence and,
// where the reaper sees its state, is still idle; it returns whether it
// ended it.
const reapSQL = `SELECT coalesce(pg_catalog.bool_or(pg_catalog.pg_terminate_backend(a.pid)), false)
	FROM pg_catalog.pg_stat_activity a
	WHERE a.pid = $1::pg_catalog.int4
	  AND coalesce(a.state LIKE 'idle in transaction%', true)
	  AND EXISTS (SELECT 1 FROM pg_catalog.pg_locks l
	              WHERE l.pid = a.pid AND l.virtualtransaction = $2::pg_catalog.text AND l.locktype = 'relation' AND l.granted AND l.mode <> 'AccessShareLock'
	                AND l.relation = (SELECT c.oid FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
	                                  WHERE n.nspname = 'fencegate' AND c.relname = 'marks'))`

// Pass looks at the fence holders of conn's database once and ends those
// past r.Limit (see Reaper). conn may be any
// session of the database (the pass pins its own search_path); its role
// needs pg_signal_backend and nothing more.
func (r *Reaper) Pass(ctx context.Context, conn *pgx.Conn) ([]Reaped, error) {
	if r.Limit <= 0 {
		return nil, fmt.Errorf("reap fence holders: the limit %v must be positive", r.Limit)
	}
	if r.heldSince == nil {
		r.heldSince = map[reapKey]time.Time{}
	}
	type holder struct {
		key     reapKey
		role    string
		app     string
		visible bool
		idle    bool
		secs    float64
	}
	var holders []holder
	err := adminTx(ctx, conn, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, reapHoldersSQL)
		if err != nil {
			return err
		}
		holders, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (holder, error) {
			var h holder
			err := row.Scan(&h.key.pid, &h.key.vxid, &h.role, &h.app, &h.visible, &h.idle, &h.secs)
			return h, err
		})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("reap fence holders: list them: %w", classify(err))
	}
	now := time.Now()
	seen := make(map[reapKey]bool, len(holders))
	var out []Reaped
	for _, h := range holders {
		seen[h.key] = true
		var held time.Duration
		switch {
		case h.visible && !h.idle:
			continue
		case h.visible:
			held = time.Duration(h.secs * float64(time.Second))
		default:
			since, ok := r.heldSince[h.key]
			if !ok {
				r.heldSince[h.key] = now
				continue
			}
			held = now.Sub(since)
		}
		if held < r.Limit {
			continue
		}
		var ended bool
		if err := adminTx(ctx, conn, func(tx pgx.Tx) error {
			return tx.QueryRow(ctx, reapSQL, h.key.pid, h.key.vxid).Scan(&ended)
		}); err != nil {
			return out, fmt.Errorf("reap fence holders: end session %d (user %s): %w", h.key.pid, h.role, classify(err))
		}
		if ended {
			delete(r.heldSince, h.key)
			out = append(out, Reaped{PID: int(h.key.pid), Role: h.role, Application: h.app, For: held, Idle: h.visible})
		}
	}
	for k := range r.heldSince {
		if !seen[k] {
			delete(r.heldSince, k)
		}
	}
	return out, nil
}

// Period is how often Run passes: a quarter of the limit, at least 100 ms.
func (r *Reaper) Period() time.Duration {
	return max(r.Limit/4, 100*time.Millisecond)
}

// Run passes every Period until ctx ends, calling reaped for each session
// it ended and failed for each pass that failed (both may be nil). connect
// opens the session a pass runs on; Run keeps it open across passes and
// opens a new one after an error.
func (r *Reaper) Run(ctx context.Context, connect func(context.Context) (*pgx.Conn, error), reaped func(Reaped), failed func(error)) {
	var conn *pgx.Conn
	defer func() {
		if conn != nil {
			conn.Close(context.Background())
		}
	}()
	t := time.NewTicker(r.Period())
	defer t.Stop()
	for {
		if conn == nil {
			c, err := connect(ctx)
			if err != nil {
				if failed != nil && ctx.Err() == nil {
					failed(err)
				}
			} else {
				conn = c
			}
		}
		if conn != nil {
			ended, err := r.Pass(ctx, conn)
			for _, e := range ended {
				if reaped != nil {
					reaped(e)
				}
			}
			if err != nil {
				if failed != nil && ctx.Err() == nil {
					failed(err)
				}
				conn.Close(context.Background())
				conn = nil
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
