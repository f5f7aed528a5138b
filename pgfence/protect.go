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
	if _, err := conn.Exec(ctx, "SELECT fencegate.protect($1::text::regclass, $2)", table, resourceExpr); err != nil {
		return fmt.Errorf("protect %s: %w", table, classify(err))
	}
	return nil
}

// Unprotect removes the checks and the column fencegate_resource from a
// protected table and all its partitions and children, in one transaction.
// A table that is not protected yields ErrNotProtected.
func Unprotect(ctx context.Context, conn *pgx.Conn, table string) error {
	if _, err := conn.Exec(ctx, "SELECT fencegate.unprotect($1::text::regclass)", table); err != nil {
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
	var rows pgx.Rows
	var err error
	if len(resources) == 0 {
		rows, err = conn.Query(ctx, `SELECT resource, token, updated_at FROM fencegate.marks ORDER BY resource COLLATE "C"`)
	} else {
		rows, err = conn.Query(ctx, `SELECT resource, token, updated_at FROM fencegate.marks WHERE resource = ANY ($1::text[]) ORDER BY resource COLLATE "C"`, resources)
	}
	if err != nil {
		return nil, fmt.Errorf("read marks: %w", classify(err))
	}
	marks, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Mark, error) {
		var m Mark
		err := r.Scan(&m.Resource, &m.Token, &m.UpdatedAt)
		return m, err
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
	if _, err := conn.Exec(ctx, "SELECT fencegate.set_mark($1, $2, $3)", resource, token, reason); err != nil {
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
	rows, err := conn.Query(ctx, `SELECT at, by_session, by_role, resource, old_token, new_token, coalesce(reason, '')
		FROM fencegate.audit WHERE $1 = '' OR resource = $1 ORDER BY id`, resource)
	if err != nil {
		return nil, fmt.Errorf("read audit: %w", classify(err))
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (AuditEntry, error) {
		var e AuditEntry
		err := r.Scan(&e.At, &e.SessionRole, &e.Role, &e.Resource, &e.OldToken, &e.NewToken, &e.Reason)
		return e, err
	})
	if err != nil {
		return nil, fmt.Errorf("read audit: %w", classify(err))
	}
	return out, nil
}
