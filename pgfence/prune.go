package pgfence

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fencegate/fencegate/internal/poll"
	"github.com/jackc/pgx/v5"
)

// DefaultPruneBatch is the number of marks Prune deletes per transaction
// when PruneOptions.Batch is zero: a fence on a resource whose mark is being
// deleted waits for that transaction, which at this size takes a few
// milliseconds.
const DefaultPruneBatch = 1000

// PruneOptions configures Prune.
type PruneOptions struct {
	// Batch is the number of marks deleted per transaction; zero means
	// DefaultPruneBatch.
	Batch int
	// Retries is how many more passes Prune makes over the marks when a
	// pass left some at or below the floor because running transactions
	// held them locked (fences in progress); zero means 3, negative none.
	Retries int
	// RetryWait is the pause before each such pass; zero means 100ms.
	RetryWait time.Duration
	// Progress, when set, is called after every batch with the marks
	// deleted so far.
	Progress func(deleted int64)
}

// PruneResult says what Prune did.
type PruneResult struct {
	FloorBefore int64         // the floor when Prune started
	FloorAfter  int64         // the floor when it ended: max(FloorBefore, the floor asked for)
	Deleted     int64         // marks deleted
	Left        int64         // marks at or below the floor still there at the end (held locked by running transactions: the next prune takes them)
	Batches     int           // transactions that deleted marks
	Took        time.Duration // time taken
}

// Querier runs one statement in a transaction of its own: a *pgx.Conn
// outside a transaction or a *pgxpool.Pool.
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Prune raises the floor of the database to floor (never lowers it) and
// deletes the marks at or below it, in batches of opts.Batch marks, each
// batch a transaction of its own (fencegate.prune_batch): a fence on a
// resource whose mark a batch deletes waits for that batch only, and a
// batch never waits for a fence (marks held locked are skipped and taken by
// a later pass). From the first batch on, every fence with a token at or
// below the floor fails with FG001, whether its resource still has a mark
// or not (pgfence/DESIGN.md, "Pruning marks"). A floor at or below the
// current one raises nothing but still deletes what is left at or below
// the current floor. It needs the owner role's rights (a superuser or a
// member of the owner role): an application role gets ErrPrivilege.
//
// db must not be inside a transaction, and its session must not run
// application code: the statements name every object with its schema, and
// fencegate.prune_batch pins its own search_path.
func Prune(ctx context.Context, db Querier, floor int64, opts PruneOptions) (PruneResult, error) {
	start := time.Now()
	var res PruneResult
	if floor < 0 {
		return res, fmt.Errorf("%w: floor %d is negative; tokens are non-negative", ErrBadInput, floor)
	}
	batch := opts.Batch
	if batch == 0 {
		batch = DefaultPruneBatch
	}
	if batch < 0 {
		return res, fmt.Errorf("%w: batch %d is negative", ErrBadInput, batch)
	}
	retries := opts.Retries
	if retries == 0 {
		retries = 3
	}
	wait := opts.RetryWait
	if wait == 0 {
		wait = 100 * time.Millisecond
	}
	var err error
	if res.FloorBefore, err = Floor(ctx, db); err != nil {
		return res, err
	}
	for pass := 0; ; pass++ {
		var after *string
		for {
			var n int64
			var last *string
			if err := db.QueryRow(ctx, "SELECT p.deleted, p.last_resource FROM fencegate.prune_batch($1::pg_catalog.int8, $2::pg_catalog.text, $3::pg_catalog.int4) p",
				floor, after, batch).Scan(&n, &last); err != nil {
				if pgCode(err) == "55P03" {
					return res, fmt.Errorf("%w: prune marks at or below %d: %s; nothing of this batch was done and the floor is as it was: %w",
						ErrLocked, floor, pruneLockHolders(ctx, db), err)
				}
				return res, fmt.Errorf("prune marks at or below %d: %w", floor, classify(err))
			}
			if n == 0 || last == nil {
				break
			}
			res.Deleted += n
			res.Batches++
			after = last
			if opts.Progress != nil {
				opts.Progress(res.Deleted)
			}
		}
		if err := db.QueryRow(ctx, `SELECT f.last_value, (SELECT pg_catalog.count(*) FROM fencegate.marks m WHERE m.token OPERATOR(pg_catalog.<=) f.last_value)
			FROM fencegate.floor f`).Scan(&res.FloorAfter, &res.Left); err != nil {
			return res, fmt.Errorf("prune marks at or below %d: count what is left: %w", floor, classify(err))
		}
		if res.Left == 0 || pass >= retries {
			break
		}
		if !poll.Sleep(ctx, wait) {
			return res, ctx.Err()
		}
	}
	res.Took = time.Since(start)
	return res, nil
}

// pruneLockHoldersSQL lists the sessions holding the lock that serializes
// prunes: the advisory lock keyed on fencegate.floor's OID, which any role
// can take (it delays prunes, it decides nothing).
const pruneLockHoldersSQL = `SELECT pg_catalog.string_agg(pg_catalog.format('pid %s (user %s, application_name %L, state %s, transaction started %s)',
	a.pid, coalesce(a.usename::pg_catalog.text, 'unknown'), coalesce(a.application_name, ''), coalesce(a.state, 'unknown'),
	coalesce(pg_catalog.to_char(a.xact_start, 'YYYY-MM-DD"T"HH24:MI:SSOF'), 'unknown')), '; ')
	FROM pg_catalog.pg_locks l JOIN pg_catalog.pg_stat_activity a ON a.pid OPERATOR(pg_catalog.=) l.pid
	WHERE l.locktype OPERATOR(pg_catalog.=) 'advisory' AND l.granted AND l.pid OPERATOR(pg_catalog.<>) pg_catalog.pg_backend_pid()
	  AND l.database OPERATOR(pg_catalog.=) (SELECT d.oid FROM pg_catalog.pg_database d WHERE d.datname OPERATOR(pg_catalog.=) pg_catalog.current_database())
	  AND l.classid OPERATOR(pg_catalog.=) 0::pg_catalog.oid AND l.objsubid OPERATOR(pg_catalog.=) 1
	  AND l.objid OPERATOR(pg_catalog.=) 'fencegate.floor'::pg_catalog.regclass::pg_catalog.oid`

// pruneLockHolders names the sessions holding the prune lock, for the
// error of a prune that gave up waiting for it.
func pruneLockHolders(ctx context.Context, db Querier) string {
	var who *string
	if err := db.QueryRow(ctx, pruneLockHoldersSQL).Scan(&who); err != nil {
		return "the sessions holding the prune lock could not be listed: " + err.Error()
	}
	if who == nil {
		return "it waited for a lock and gave up; no session holds the prune lock any more: try again"
	}
	return "another session holds the prune lock (the advisory lock on fencegate.floor's OID): " + *who +
		"; end that session (pg_terminate_backend) if it is not a prune"
}

// Floor returns the floor of the database: every fence with a token at or
// below it is refused, whatever the resource.
func Floor(ctx context.Context, db Querier) (int64, error) {
	var f int64
	if err := db.QueryRow(ctx, "SELECT f.last_value FROM fencegate.floor f").Scan(&f); err != nil {
		return 0, fmt.Errorf("read the floor: %w", classify(err))
	}
	return f, nil
}

// MarkStats describes the marks of a database.
type MarkStats struct {
	Count  int64      // marks
	Bytes  int64      // size on disk of fencegate.marks with its indexes and TOAST (pg_total_relation_size)
	Floor  int64      // the floor
	Oldest *time.Time // updated_at of the least recently advanced mark; nil when there is none
}

// Stats returns the marks' count, size on disk, the floor and the oldest
// mark's updated_at, in one transaction under the pinned search_path.
func Stats(ctx context.Context, conn *pgx.Conn) (MarkStats, error) {
	var st MarkStats
	err := adminTx(ctx, conn, func(tx pgx.Tx) error {
		return tx.QueryRow(ctx, `SELECT (SELECT count(*) FROM fencegate.marks), pg_total_relation_size('fencegate.marks'::regclass),
			(SELECT f.last_value FROM fencegate.floor f), (SELECT min(m.updated_at) FROM fencegate.marks m)`).Scan(&st.Count, &st.Bytes, &st.Floor, &st.Oldest)
	})
	if err != nil {
		if errors.Is(err, ErrNotInstalled) || errors.Is(err, ErrPrivilege) {
			return st, fmt.Errorf("read the marks' statistics: %w", err)
		}
		return st, fmt.Errorf("read the marks' statistics: %w", classify(err))
	}
	return st, nil
}
