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

// fenceAccounts fences, in tx, the accounts 0 to resources-1 with token 1:
// one fence for one account, one fence_many for more.
func fenceAccounts(ctx context.Context, tx pgx.Tx, resources int) error {
	if resources <= 1 {
		_, err := tx.Exec(ctx, fencegate.FenceSQL, "acct:0", int64(1))
		return err
	}
	_, err := tx.Exec(ctx, `SELECT fencegate.fence_many(array_agg('acct:' || g), 1) FROM generate_series(0, $1::bigint - 1) g`, resources)
	return err
}

// BulkInsert inserts rows rows with ids from first on in one INSERT ...
// SELECT transaction, spread over resources accounts (row i belongs to
// account i mod resources), fenced first: one fence for one account, one
// fence_many for more.
func BulkInsert(ctx context.Context, conn *pgx.Conn, table string, first int64, rows, resources int) error {
	if resources < 1 {
		resources = 1
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	if err := fenceAccounts(ctx, tx, resources); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, `INSERT INTO `+table+` (id, acct, note) SELECT g, g % $3, 'bulk' FROM generate_series($1::bigint, $2::bigint) g`, first, first+int64(rows)-1, int64(resources)); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// CopyData is the COPY text of BulkCopy: rows rows with ids from first on,
// row i of account i mod resources.
func CopyData(first int64, rows, resources int) string {
	if resources < 1 {
		resources = 1
	}
	var b strings.Builder
	for i := int64(0); i < int64(rows); i++ {
		id := first + i
		b.WriteString(strconv.FormatInt(id, 10))
		b.WriteByte('\t')
		b.WriteString(strconv.FormatInt(id%int64(resources), 10))
		b.WriteString("\tbulk\n")
	}
	return b.String()
}

// BulkCopy is BulkInsert through COPY FROM STDIN (text format) of data
// (CopyData, built outside the timed part).
func BulkCopy(ctx context.Context, conn *pgx.Conn, table string, data string, resources int) error {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	if err := fenceAccounts(ctx, tx, resources); err != nil {
		return err
	}
	if _, err := tx.Conn().PgConn().CopyFrom(ctx, strings.NewReader(data), "COPY "+table+" (id, acct, note) FROM STDIN"); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// BulkUpdate updates, in one fenced transaction, every row with an id from
// first on (rows BulkInsert or BulkCopy wrote over resources accounts),
// keeping each row's resource: one fence, or one fence_many, covers them.
func BulkUpdate(ctx context.Context, conn *pgx.Conn, table string, first int64, resources int) error {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	if err := fenceAccounts(ctx, tx, resources); err != nil {
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
