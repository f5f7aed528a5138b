package pgfence

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/jackc/pgx/v5"
)

// Protect guards table (a name as SQL writes it: orders, shop.orders,
// "Order Lines"): from then on PostgreSQL refuses every write to one of its
// rows (INSERT, both rows of an UPDATE, DELETE, MERGE, COPY FROM, through
// any view, rule, cascade or function) unless the writing transaction holds
// a standing fence on the row's resource, and it refuses TRUNCATE. The
// resource of a row is resourceExpr, an SQL expression over the table's
// columns ('order:' || id; a constant such as 'ledger' makes the whole table
// one resource), stored once per row in the generated column
// fencegate_resource. Partitions and inheritance children, present and
// future, are covered.
//
// Protecting a protected table again replaces the expression, or, when it
// is the same, only restores the checks (of partitions created since, for
// instance); either way in one transaction. An expression that does not
// parse, names a missing column or reaches anything whose result could
// change later (a function, operator, type or collation outside pg_catalog;
// a value whose text form depends on session settings, such as a float or a
// timestamp) is refused with ErrBadInput and nothing is installed.
//
// The connected role must own the table (or be a superuser) and be a member
// of the owner role. PostgreSQL sends a WARNING, through the connection's
// notice handler, when the table's owner can log in; Inspect lists it too.
func Protect(ctx context.Context, conn *pgx.Conn, table, resourceExpr string) error {
	path, err := sessionPath(ctx, conn)
	if err != nil {
		return fmt.Errorf("protect %s: %w", table, err)
	}
	err = adminTx(ctx, conn, func(tx pgx.Tx) error {
		oid, err := resolveTable(ctx, tx, path, table)
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, "SELECT fencegate.protect($1::pg_catalog.oid::pg_catalog.regclass, $2)", oid, resourceExpr)
		return err
	})
	if err != nil {
		return fmt.Errorf("protect %s: %w", table, classify(err))
	}
	return nil
}

// sessionPath is the search_path names typed by an administrator resolve
// under: the session's own, or, in a session AdminSession pinned, the one
// the session began with (its role's and database's setting). SHOW runs
// no code an application could have written.
func sessionPath(ctx context.Context, conn *pgx.Conn) (string, error) {
	var path string
	if err := conn.QueryRow(ctx, "SHOW search_path").Scan(&path); err != nil {
		return "", fmt.Errorf("read search_path: %w", classify(err))
	}
	if path != adminSearchPath {
		return path, nil
	}
	var reset string
	if err := conn.QueryRow(ctx, "SELECT s.reset_val FROM pg_catalog.pg_settings s WHERE s.name = 'search_path'").Scan(&reset); err != nil {
		return "", fmt.Errorf("read search_path: %w", classify(err))
	}
	return reset, nil
}

// resolveTable finds the table an administrator named, as SQL names it,
// under path, inside tx (whose search_path is pinned). Only the lookup of
// the name runs under path: a cast between built-in types, which
// PostgreSQL finds in pg_cast by the types' identities, never by name; the
// pinned path is back for the next statement.
func resolveTable(ctx context.Context, tx pgx.Tx, path, table string) (uint32, error) {
	if _, err := tx.Exec(ctx, "SELECT pg_catalog.set_config('search_path', $1::pg_catalog.text, true)", path); err != nil {
		return 0, err
	}
	var oid uint32
	err := tx.QueryRow(ctx, "SELECT $1::pg_catalog.text::pg_catalog.regclass::pg_catalog.oid", table).Scan(&oid)
	if err != nil {
		return 0, err
	}
	if _, err := tx.Exec(ctx, "SET LOCAL search_path = "+adminSearchPath); err != nil {
		return 0, err
	}
	return oid, nil
}

// Unprotect removes the checks and the column fencegate_resource from a
// protected table and all its partitions and children, in one transaction.
// A table that is not protected yields ErrNotProtected.
func Unprotect(ctx context.Context, conn *pgx.Conn, table string) error {
	path, err := sessionPath(ctx, conn)
	if err != nil {
		return fmt.Errorf("unprotect %s: %w", table, err)
	}
	err = adminTx(ctx, conn, func(tx pgx.Tx) error {
		oid, err := resolveTable(ctx, tx, path, table)
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, "SELECT fencegate.unprotect($1::pg_catalog.oid::pg_catalog.regclass)", oid)
		return err
	})
	if err != nil {
		err = classify(err)
		if pgCode(err) == fencegate.CodeMisuse && strings.Contains(err.Error(), "is not protected") {
			return fmt.Errorf("unprotect %s: %w: %w", table, ErrNotProtected, err)
		}
		return fmt.Errorf("unprotect %s: %w", table, err)
	}
	return nil
}

// Mark is one resource's high-water mark.
type Mark struct {
	Resource  string
	Token     int64
	UpdatedAt time.Time
}

// Marks returns the marks of the named resources (those that have one), or
// of every resource when none is named, ordered byte-wise by resource.
func Marks(ctx context.Context, conn *pgx.Conn, resources ...string) ([]Mark, error) {
	var marks []Mark
	err := adminTx(ctx, conn, func(tx pgx.Tx) error {
		var rows pgx.Rows
		var err error
		if len(resources) == 0 {
			rows, err = tx.Query(ctx, `SELECT resource, token, updated_at FROM fencegate.marks ORDER BY resource COLLATE pg_catalog."C"`)
		} else {
			rows, err = tx.Query(ctx, `SELECT resource, token, updated_at FROM fencegate.marks WHERE resource = ANY ($1::pg_catalog.text[]) ORDER BY resource COLLATE pg_catalog."C"`, resources)
		}
		if err != nil {
			return err
		}
		marks, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (Mark, error) {
			var m Mark
			err := r.Scan(&m.Resource, &m.Token, &m.UpdatedAt)
			return m, err
		})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("read marks: %w", classify(err))
	}
	return marks, nil
}

// SetMark sets resource's mark to token, lower or higher than before, and
// records the change (who, when, old and new token, reason) in
// fencegate.audit. It is the only way a mark goes down. It waits for a
// transaction holding the resource's fence to end, and the transaction that
// runs it holds no fence on the resource afterwards. The connected role must
// be a superuser or a member of the owner role.
func SetMark(ctx context.Context, conn *pgx.Conn, resource string, token int64, reason string) error {
	err := adminTx(ctx, conn, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "SELECT fencegate.set_mark($1, $2, $3)", resource, token, reason)
		return err
	})
	if err != nil {
		return fmt.Errorf("set mark of %q: %w", resource, classify(err))
	}
	return nil
}

// AuditEntry is one row of fencegate.audit.
type AuditEntry struct {
	At          time.Time
	SessionRole string
	Role        string
	Resource    string
	OldToken    *int64
	NewToken    int64
	Reason      string
}

// Audit returns the recorded mark changes of resource (of every resource
// when it is empty), oldest first.
func Audit(ctx context.Context, conn *pgx.Conn, resource string) ([]AuditEntry, error) {
	var out []AuditEntry
	err := adminTx(ctx, conn, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT at, by_session, by_role, resource, old_token, new_token, coalesce(reason, '')
			FROM fencegate.audit WHERE $1::pg_catalog.text = '' OR resource = $1::pg_catalog.text ORDER BY id`, resource)
		if err != nil {
			return err
		}
		out, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (AuditEntry, error) {
			var e AuditEntry
			err := r.Scan(&e.At, &e.SessionRole, &e.Role, &e.Resource, &e.OldToken, &e.NewToken, &e.Reason)
			return e, err
		})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("read audit: %w", classify(err))
	}
	return out, nil
}
