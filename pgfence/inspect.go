package pgfence

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// Status describes schema fencegate in one database.
type Status struct {
	Installed    bool
	Version      int      // 0 when not installed; 1 for the proxy's earlier schema
	OwnerRole    string   // owner of schema fencegate
	Problems     []string // HealthQuery's rows: each names the command that repairs it; empty when healthy
	Tables       []ProtectedTable
	AppRoles     []string // roles granted EXECUTE on fencegate.fence
	GuardDDL     bool     // the DDL guard's event triggers exist
	Marks        int64    // number of marks (-1 when the connected role may not read them)
	Floor        int64    // the floor (fencegate.floor): every fence with a token at or below it is refused; -1 when missing or the connected role may not read it
	FenceTimeout string   // the database's fencegate.fence_timeout, "" when unset (the fence then waits 5s)
	Warnings     []string // weaker than it should be, though not broken
	// Server is the server's version. Inspect fails with
	// ErrUnsupportedServer on a major older than MinMajor; on one newer than
	// MaxMajor it reports and adds a warning (the caller decides, as the
	// status command does, whether to go on).
	Server ServerVersion
}

// ProtectedTable is one table of a protected hierarchy.
type ProtectedTable struct {
	Table    string // as SQL names it (schema-qualified)
	Root     string // the table protect was called on
	Resource string // the resource expression, as PostgreSQL prints it
	Owner    string
	// StatementChecks is false for a partition created after protect ran
	// and before the DDL guard or a new protect gave it its own checks: it
	// is checked row by row (sound, slower) and TRUNCATE is not refused on it.
	StatementChecks bool
	OwnerCanLogin   bool
}

// Inspect reports the state of schema fencegate without changing anything.
// It reads the system catalogs only (and counts the marks when it may), so
// any role can run it. It runs in a transaction of its own under the
// pinned search_path (see adminSearchPath), so no name it uses resolves to
// an application's function, operator or type, whatever the session's path.
func Inspect(ctx context.Context, conn *pgx.Conn) (*Status, error) {
	var st *Status
	err := adminTx(ctx, conn, func(tx pgx.Tx) error {
		var err error
		st, err = inspect(ctx, tx)
		return err
	})
	if err != nil {
		return nil, err
	}
	return st, nil
}

func inspect(ctx context.Context, conn pgx.Tx) (*Status, error) {
	st := &Status{Marks: -1, Floor: -1}
	server, err := ReadServerVersion(ctx, conn)
	if err != nil {
		return nil, fmt.Errorf("inspect fencegate schema: %w", err)
	}
	st.Server = server
	if err := server.Check(true); err != nil {
		return nil, fmt.Errorf("inspect fencegate schema: %w", err)
	}
	if err := server.Check(false); err != nil {
		st.Warnings = append(st.Warnings, strings.TrimPrefix(err.Error(), ErrUntestedServer.Error()+": "))
	}
	var owner, versionBody *string
	var hasV1, hasMarks bool
	err = conn.QueryRow(ctx, `SELECT n.nspowner::regrole::text,
		(SELECT p.prosrc FROM pg_proc p WHERE p.oid = to_regprocedure('fencegate.schema_version()')),
		to_regprocedure('fencegate.schema_v1()') IS NOT NULL,
		to_regclass('fencegate.marks') IS NOT NULL
		FROM (SELECT 1) one LEFT JOIN pg_namespace n ON n.nspname = 'fencegate'`).Scan(&owner, &versionBody, &hasV1, &hasMarks)
	if err != nil {
		return nil, fmt.Errorf("inspect fencegate schema: %w", classify(err))
	}
	if owner != nil {
		st.Installed = true
		st.OwnerRole = *owner
	}
	switch {
	case versionBody != nil:
		st.Version = SchemaVersion
		if m := versionBodyRE.FindStringSubmatch(*versionBody); m != nil {
			fmt.Sscan(m[1], &st.Version)
		}
	case hasV1 || hasMarks:
		st.Version = 1
	}
	rows, err := conn.Query(ctx, HealthQuery)
	if err != nil {
		return nil, fmt.Errorf("inspect fencegate schema: %w", classify(err))
	}
	if st.Problems, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
		return nil, fmt.Errorf("inspect fencegate schema: %w", classify(err))
	}
	rows, err = conn.Query(ctx, protectedTablesSQL)
	if err != nil {
		return nil, fmt.Errorf("inspect protected tables: %w", classify(err))
	}
	st.Tables, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (ProtectedTable, error) {
		var t ProtectedTable
		var expr *string
		err := r.Scan(&t.Table, &t.Root, &expr, &t.Owner, &t.StatementChecks, &t.OwnerCanLogin)
		if expr != nil {
			t.Resource = *expr
		}
		return t, err
	})
	if err != nil {
		return nil, fmt.Errorf("inspect protected tables: %w", classify(err))
	}
	for _, t := range st.Tables {
		if t.OwnerCanLogin {
			st.Warnings = append(st.Warnings, fmt.Sprintf("protected table %s is owned by role %s, which can log in: the owner can drop or disable its checks; give it to a role that cannot log in", t.Table, t.Owner))
		}
		if !t.StatementChecks {
			st.Warnings = append(st.Warnings, fmt.Sprintf("partition %s was added after %s was protected: it is checked row by row; to give it statement-level checks, install the DDL guard or run: fencegate protect %s --resource %s --db DSN", t.Table, t.Root, shellQuote(t.Root), shellQuote(orExpr(t.Resource))))
		}
	}
	if !st.Installed {
		return st, nil
	}
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_event_trigger WHERE evtname IN ('fencegate_guard_ddl', 'fencegate_guard_drop')),
		coalesce((SELECT split_part(c, '=', 2) FROM pg_db_role_setting s, unnest(s.setconfig) c
		          WHERE s.setdatabase = (SELECT oid FROM pg_database WHERE datname = current_database()) AND s.setrole = 0
		            AND c LIKE 'fencegate.fence!_timeout=%' ESCAPE '!'), '')`).Scan(&st.GuardDDL, &st.FenceTimeout); err != nil {
		return nil, fmt.Errorf("inspect fencegate schema: %w", classify(err))
	}
	rows, err = conn.Query(ctx, `SELECT DISTINCT a.grantee::regrole::text FROM pg_proc p, aclexplode(p.proacl) a
		WHERE p.pronamespace = 'fencegate'::regnamespace AND p.proname = 'fence' AND a.grantee <> 0 AND a.grantee <> p.proowner
		  AND a.privilege_type = 'EXECUTE' ORDER BY 1`)
	if err != nil {
		return nil, fmt.Errorf("inspect fencegate schema: %w", classify(err))
	}
	if st.AppRoles, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
		return nil, fmt.Errorf("inspect fencegate schema: %w", classify(err))
	}
	if w, err := preparedWarning(ctx, conn); err != nil {
		return nil, fmt.Errorf("inspect fencegate schema: %w", err)
	} else if w != "" {
		st.Warnings = append(st.Warnings, w)
	}
	var canRead bool
	if err := conn.QueryRow(ctx, `SELECT to_regclass('fencegate.marks') IS NOT NULL AND has_table_privilege('fencegate.marks', 'SELECT')`).Scan(&canRead); err != nil {
		return nil, fmt.Errorf("inspect fencegate schema: %w", classify(err))
	}
	if canRead {
		if err := conn.QueryRow(ctx, "SELECT count(*) FROM fencegate.marks").Scan(&st.Marks); err != nil {
			return nil, fmt.Errorf("inspect fencegate schema: count marks: %w", classify(err))
		}
	}
	if err := conn.QueryRow(ctx, `SELECT c.oid IS NOT NULL AND c.relkind = 'S' AND has_sequence_privilege(c.oid, 'SELECT')
		FROM (SELECT 1) one LEFT JOIN pg_class c ON c.relnamespace = 'fencegate'::regnamespace AND c.relname = 'floor'`).Scan(&canRead); err != nil {
		return nil, fmt.Errorf("inspect fencegate schema: %w", classify(err))
	}
	if canRead {
		if err := conn.QueryRow(ctx, "SELECT last_value FROM fencegate.floor").Scan(&st.Floor); err != nil {
			return nil, fmt.Errorf("inspect fencegate schema: read the floor: %w", classify(err))
		}
	}
	return st, nil
}

// protectedTablesSQL lists every table of every protected hierarchy.
const protectedTablesSQL = `WITH RECURSIVE roots AS (` + protectedRootsByIdentitySQL + `),
tree(root, relid, depth) AS (
	SELECT relid, relid, 0 FROM roots
	UNION ALL
	SELECT tree.root, i.inhrelid, tree.depth + 1 FROM tree JOIN pg_inherits i ON i.inhparent = tree.relid
	JOIN pg_class k ON k.oid = i.inhrelid AND k.relpersistence <> 't')
SELECT t.relid::regclass::text, t.root::regclass::text,
       (SELECT pg_get_expr(d.adbin, d.adrelid) FROM pg_attribute a JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
        WHERE a.attrelid = t.relid AND a.attname = 'fencegate_resource' AND NOT a.attisdropped),
       r.rolname::text,
       EXISTS (SELECT 1 FROM pg_trigger g WHERE g.tgrelid = t.relid AND g.tgname = 'fencegate_ins' AND g.tgfoid = ` + checkInsertOIDSQL + `),
       r.rolcanlogin
FROM tree t JOIN pg_class c ON c.oid = t.relid JOIN pg_roles r ON r.oid = c.relowner
ORDER BY t.root::regclass::text, t.depth, t.relid::regclass::text`

// MarkHolder is a transaction that holds fencegate.marks locked: a session
// in an open transaction that wrote or locked marks (a fence), or a
// prepared transaction of this database, which holds whatever it locked
// until an administrator commits or rolls it back (COMMIT PREPARED,
// ROLLBACK PREPARED), across disconnects and restarts.
type MarkHolder struct {
	Prepared    bool      // a prepared transaction; else a session
	PID         int       // the session's process id; 0 for a prepared transaction
	GID         string    // the prepared transaction's identifier; "" for a session
	Role        string    // the session's user, or the prepared transaction's owner
	Application string    // the session's application_name
	Client      string    // the session's client address ("" for local or prepared)
	State       string    // the session's state (active, idle in transaction, ...), or "prepared"
	Since       time.Time // when the transaction started, or was prepared
}

// markHoldersSQL lists sessions holding a lock stronger than ACCESS SHARE
// on fencegate.marks (a fence takes ROW EXCLUSIVE, and locks its mark's
// row) and the prepared transactions of this database. Which rows a
// transaction locked is not listed: PostgreSQL keeps row locks in the rows
// (xmax), and the fence takes its lock in a subtransaction (its exception
// block), whose id no catalog view ties to its session.
const markHoldersSQL = `WITH h AS (
	SELECT DISTINCT false AS prepared, a.pid, ''::pg_catalog.text AS gid, coalesce(a.usename::pg_catalog.text, '') AS role,
	       coalesce(a.application_name, '') AS app, coalesce(pg_catalog.host(a.client_addr), '') AS client, coalesce(a.state, '') AS state,
	       a.xact_start AS since
	FROM pg_catalog.pg_locks l JOIN pg_catalog.pg_stat_activity a ON a.pid = l.pid
	WHERE l.locktype = 'relation' AND l.granted AND l.mode <> 'AccessShareLock'
	  AND l.database = (SELECT d.oid FROM pg_catalog.pg_database d WHERE d.datname = pg_catalog.current_database())
	  AND l.relation = (SELECT c.oid FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
	                     WHERE n.nspname = 'fencegate' AND c.relname = 'marks') AND a.pid <> pg_catalog.pg_backend_pid()
	UNION ALL
	SELECT true, 0, p.gid, p.owner::pg_catalog.text, '', '', 'prepared', p.prepared
	FROM pg_catalog.pg_prepared_xacts p WHERE p.database = pg_catalog.current_database())
SELECT h.prepared, h.pid, h.gid, h.role, h.app, h.client, h.state, h.since
FROM h ORDER BY h.prepared DESC, h.since, h.pid, h.gid`

// PreparedWarning returns the warning Inspect gives when the server allows
// prepared transactions (max_prepared_transactions > 0), "" when it does
// not: a fence taken in a transaction that is then PREPAREd keeps its mark
// locked until an administrator ends it (see MarkHolders).
func PreparedWarning(ctx context.Context, conn *pgx.Conn) (string, error) {
	var w string
	err := adminTx(ctx, conn, func(tx pgx.Tx) error {
		var err error
		w, err = preparedWarning(ctx, tx)
		return err
	})
	return w, err
}

func preparedWarning(ctx context.Context, tx pgx.Tx) (string, error) {
	var prepared int
	if err := tx.QueryRow(ctx, `SELECT pg_catalog.current_setting('max_prepared_transactions')::pg_catalog.int4`).Scan(&prepared); err != nil {
		return "", fmt.Errorf("read max_prepared_transactions: %w", classify(err))
	}
	if prepared == 0 {
		return "", nil
	}
	return fmt.Sprintf("max_prepared_transactions is %d: a fence taken in a transaction that is then PREPAREd keeps its resource's mark locked across disconnects and restarts until the transaction is committed or rolled back by hand; set it to 0 unless two-phase commit is needed", prepared), nil
}

// MarkHolders lists the transactions that hold fencegate.marks locked
// (see MarkHolder), oldest first, prepared transactions before sessions.
// It reads catalog views only; another role's session details need a
// superuser or pg_read_all_stats.
func MarkHolders(ctx context.Context, conn *pgx.Conn) ([]MarkHolder, error) {
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{AccessMode: pgx.ReadOnly})
	if err != nil {
		return nil, fmt.Errorf("list mark holders: %w", classify(err))
	}
	defer tx.Rollback(ctx) //nolint:errcheck // read-only
	if _, err := tx.Exec(ctx, "SET LOCAL search_path = pg_catalog, pg_temp"); err != nil {
		return nil, fmt.Errorf("list mark holders: pin the search_path: %w", classify(err))
	}
	rows, err := tx.Query(ctx, markHoldersSQL)
	if err != nil {
		return nil, fmt.Errorf("list mark holders: %w", classify(err))
	}
	hs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (MarkHolder, error) {
		var h MarkHolder
		var since *time.Time
		err := r.Scan(&h.Prepared, &h.PID, &h.GID, &h.Role, &h.Application, &h.Client, &h.State, &since)
		if since != nil {
			h.Since = *since
		}
		return h, err
	})
	if err != nil {
		return nil, fmt.Errorf("list mark holders: %w", classify(err))
	}
	return hs, nil
}

// shellQuote quotes s as one word for a POSIX shell (see shq): a command a
// message names gets pasted into a shell, and a table's name is the
// application's choice.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func orExpr(expr string) string {
	if expr == "" {
		return "EXPR"
	}
	return expr
}
