// Package fencebench measures what a protected table costs: the same
// workloads on a protected table and on its unprotected twin (identical
// columns, the same generated resource column, no checks), timed and, since
// the machine is shared, with the CPU time the serving PostgreSQL backend
// spent per operation, read from /proc (PostgreSQL must run on this host).
// The Go benchmarks of package pgfence and the fencebench command of the
// bench module use it.
package fencebench

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/internal/cputime"
	"github.com/jackc/pgx/v5"
)

// Tables are the two tables every workload runs on.
const (
	Protected   = "bench_protected"
	Unprotected = "bench_plain"
)

// Setup creates (or recreates) both tables with rows rows, one account per
// row, and protects the first with 'acct:' || acct. The connected role must
// be able to protect (a superuser). schema fencegate must be installed.
func Setup(ctx context.Context, conn *pgx.Conn, rows int) error {
	for _, t := range []string{Protected, Unprotected} {
		q := fmt.Sprintf(`DROP TABLE IF EXISTS %[1]s;
			CREATE TABLE %[1]s (id bigint PRIMARY KEY, acct bigint NOT NULL, n bigint NOT NULL DEFAULT 0, note text);
			INSERT INTO %[1]s (id, acct) SELECT g, g FROM generate_series(1, %[2]d) g;
			ANALYZE %[1]s`, t, rows)
		if _, err := conn.Exec(ctx, q, pgx.QueryExecModeSimpleProtocol); err != nil {
			return fmt.Errorf("set up %s: %w", t, err)
		}
	}
	// The twin carries the same stored column, so that the comparison is
	// the price of the checks alone.
	if _, err := conn.Exec(ctx, `ALTER TABLE `+Unprotected+` ADD COLUMN fencegate_resource text COLLATE "C" GENERATED ALWAYS AS ('acct:' || acct) STORED`); err != nil {
		return fmt.Errorf("set up %s: %w", Unprotected, err)
	}
	if _, err := conn.Exec(ctx, `SELECT fencegate.protect($1, $2)`, Protected, "'acct:' || acct"); err != nil {
		return fmt.Errorf("protect %s: %w", Protected, err)
	}
	return nil
}

// Empty removes the rows above keep from both tables, outside the timed
// part (TRUNCATE is refused on the protected table; this fences every
// resource it deletes).
func Empty(ctx context.Context, conn *pgx.Conn, keep int) error {
	for _, t := range []string{Protected, Unprotected} {
		tx, err := conn.Begin(ctx)
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `SELECT fencegate.fence_many(array_agg(DISTINCT fencegate_resource), 1) FROM `+t+` WHERE id > $1 HAVING count(*) > 0`, keep)
		if err == nil {
			_, err = tx.Exec(ctx, `DELETE FROM `+t+` WHERE id > $1`, keep)
		}
		if err != nil {
			tx.Rollback(ctx) //nolint:errcheck
			return fmt.Errorf("empty %s: %w", t, err)
		}
		if err := tx.Commit(ctx); err != nil {
			return err
		}
		if _, err := conn.Exec(ctx, "VACUUM "+t); err != nil {
			return err
		}
	}
	return nil
}

// FencedWrite is one fenced single-row write transaction: BEGIN; fence the
// row's account; UPDATE the row; COMMIT.
func FencedWrite(ctx context.Context, conn *pgx.Conn, table string, id int64, token int64) error {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	if _, err := tx.Exec(ctx, fencegate.FenceSQL, "acct:"+strconv.FormatInt(id, 10), token); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, "UPDATE "+table+" SET n = n + 1 WHERE id = $1", id); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// BulkInsert inserts rows rows with ids from first on in one INSERT ...
// SELECT transaction. With distinct, every row is an account of its own and
// the transaction fences them all with one fence_many; otherwise all rows
// belong to account 0 and one fence covers them.
func BulkInsert(ctx context.Context, conn *pgx.Conn, table string, first int64, rows int, distinct bool) error {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	acct := "0"
	if distinct {
		acct = "g"
		if _, err := tx.Exec(ctx, `SELECT fencegate.fence_many(array_agg('acct:' || g), 1) FROM generate_series($1::bigint, $2::bigint) g`, first, first+int64(rows)-1); err != nil {
			return err
		}
	} else if _, err := tx.Exec(ctx, fencegate.FenceSQL, "acct:0", int64(1)); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, `INSERT INTO `+table+` (id, acct, note) SELECT g, `+acct+`, 'bulk' FROM generate_series($1::bigint, $2::bigint) g`, first, first+int64(rows)-1); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// BulkCopy is BulkInsert through COPY FROM STDIN (text format), all rows
// of account 0.
func BulkCopy(ctx context.Context, conn *pgx.Conn, table string, first int64, rows int) error {
	var b strings.Builder
	for i := int64(0); i < int64(rows); i++ {
		b.WriteString(strconv.FormatInt(first+i, 10))
		b.WriteString("\t0\tbulk\n")
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	if _, err := tx.Exec(ctx, fencegate.FenceSQL, "acct:0", int64(1)); err != nil {
		return err
	}
	if _, err := tx.Conn().PgConn().CopyFrom(ctx, strings.NewReader(b.String()), "COPY "+table+" (id, acct, note) FROM STDIN"); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// BulkUpdate updates, in one fenced transaction, every row with an id from
// first on, all of account 0 (rows BulkInsert or BulkCopy wrote): one
// fence covers them.
func BulkUpdate(ctx context.Context, conn *pgx.Conn, table string, first int64) error {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	if _, err := tx.Exec(ctx, fencegate.FenceSQL, "acct:0", int64(1)); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, `UPDATE `+table+` SET n = n + 1 WHERE id >= $1`, first); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// BackendCPU returns the CPU time (user + system) the backend serving conn
// has used so far, read from /proc: PostgreSQL must run on this host.
func BackendCPU(ctx context.Context, conn *pgx.Conn) (time.Duration, error) {
	var pid int
	if err := conn.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		return 0, err
	}
	d, err := cputime.ProcessCPU(pid)
	if err != nil {
		return 0, fmt.Errorf("%w (the backend's CPU time is read from /proc: is PostgreSQL on this host?)", err)
	}
	return d, nil
}
