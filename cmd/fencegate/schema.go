package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/fencegate/fencegate/pgfence"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// The in-database half: schema fencegate, protected tables, marks.
//
//	fencegate schema install|upgrade|status --db DSN [--grant ROLE...] [--relay ROLE...] [--guard-ddl] [--owner ROLE]
//	fencegate schema require-signed --db DSN --signing-keys FILE [--cluster-id ID | --servers URLS] [--off]
//	fencegate protect TABLE --resource EXPR --db DSN
//	fencegate unprotect TABLE --db DSN
//	fencegate marks show [RESOURCE...] --db DSN
//	fencegate marks set RESOURCE TOKEN --db DSN [--reason TEXT]
//	fencegate marks holders --db DSN
//	fencegate marks prune --db DSN --floor N
//	fencegate marks stats --db DSN

func init() {
	register(&command{name: "schema", summary: "install, upgrade or check schema fencegate in a database", run: runSchema})
	register(&command{name: "protect", summary: "make PostgreSQL refuse unfenced writes to a table", run: runProtect})
	register(&command{name: "unprotect", summary: "remove a table's protection", run: runUnprotect})
	register(&command{name: "marks", summary: "show or set resources' high-water marks (audited), or prune them under a floor", run: runMarks})
}

const dbFlagHelp = "the database to act on, as a libpq DSN or URL (default $DATABASE_URL)"

// stringList is a repeatable flag; each use may also hold a comma-separated list.
type stringList []string

func (l *stringList) String() string { return strings.Join(*l, ",") }
func (l *stringList) Set(v string) error {
	*l = append(*l, splitList(v)...)
	return nil
}

func runSchema(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	usage := func() {
		fmt.Fprintln(stderr, "Usage: fencegate schema install|upgrade|status|require-signed --db DSN [flags]")
		fmt.Fprintln(stderr)
		fmt.Fprintln(stderr, "  install  create schema fencegate, or bring it to the current version (idempotent)")
		fmt.Fprintln(stderr, "  upgrade  the same, for a database that already holds the schema (keeps every mark)")
		fmt.Fprintln(stderr, "  status   print the schema's version, protected tables and problems (exit status 1 on problems)")
		fmt.Fprintln(stderr, "  require-signed  make fences need tokens the token service signed (--off: allow unsigned again)")
		fmt.Fprintln(stderr)
		fmt.Fprintln(stderr, "Run 'fencegate schema SUBCOMMAND --help' for its flags.")
	}
	if len(args) == 0 {
		usage()
		return usagef("missing subcommand; use install, upgrade, status or require-signed")
	}
	switch args[0] {
	case "install", "upgrade":
		return runSchemaInstall(ctx, args[0], args[1:], stdout, stderr)
	case "status":
		return runSchemaStatus(ctx, args[1:], stdout, stderr)
	case "require-signed":
		return runSchemaRequireSigned(ctx, args[1:], stdout, stderr)
	case "-h", "--help", "help":
		usage()
		return flag.ErrHelp
	}
	usage()
	return usagef("unknown subcommand %q; use install, upgrade, status or require-signed", args[0])
}

func runSchemaInstall(ctx context.Context, sub string, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("fencegate schema "+sub, flag.ContinueOnError)
	db := fs.String("db", "", dbFlagHelp)
	var grant stringList
	fs.Var(&grant, "grant", "an application role to give what taking fences needs (USAGE on schema fencegate, EXECUTE on fence, fence_many and effect, SELECT on the marks); repeat or separate with commas (default none)")
	var relayRoles stringList
	fs.Var(&relayRoles, "relay", "a role to give what 'fencegate relay' needs (USAGE on schema fencegate, EXECUTE on the effect_* functions; no fence, no table); repeat or separate with commas (default none)")
	guard := fs.Bool("guard-ddl", false, "also install the DDL guard: event triggers refusing DDL on protected tables by roles outside the owner role (needs a superuser)")
	owner := fs.String("owner", "", "the role that owns schema fencegate; created NOLOGIN when missing (default: the schema's current owner when nobody can log in as it, else "+pgfence.DefaultOwnerRole+")")
	allowNewer := fs.Bool("allow-newer-postgres", false, allowNewerHelp)
	pos, err := parseInterspersed(fs, args, stderr)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef("unexpected argument %q; roles to grant go with --grant", pos[0])
	}
	conn, name, err := connectDB(ctx, *db)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	rep, err := pgfence.Install(ctx, conn, pgfence.InstallOptions{OwnerRole: *owner, Grant: grant, Relay: relayRoles, GuardDDL: *guard, RequireInstalled: sub == "upgrade", AllowNewerServer: *allowNewer})
	if err != nil {
		if errors.Is(err, pgfence.ErrNotInstalled) {
			return fmt.Errorf("schema fencegate is not installed in %s: run 'fencegate schema install --db DSN' first", name)
		}
		return explain(err, name)
	}
	switch {
	case len(rep.Actions) == 0:
		fmt.Fprintf(stdout, "schema fencegate version %d in %s is up to date; nothing changed\n", rep.ToVersion, name)
	case rep.FromVersion == 0:
		fmt.Fprintf(stdout, "installed schema fencegate version %d in %s\n", rep.ToVersion, name)
	case rep.FromVersion != rep.ToVersion:
		fmt.Fprintf(stdout, "upgraded schema fencegate from version %d to %d in %s\n", rep.FromVersion, rep.ToVersion, name)
	case len(rep.Actions) == len(rep.Granted):
		fmt.Fprintf(stdout, "schema fencegate version %d in %s is up to date; granted %s what taking fences needs\n", rep.ToVersion, name, strings.Join(rep.Granted, ", "))
	default:
		fmt.Fprintf(stdout, "repaired schema fencegate version %d in %s\n", rep.ToVersion, name)
	}
	for _, a := range rep.Actions {
		fmt.Fprintf(stdout, "  - %s\n", a)
	}
	fmt.Fprintf(stdout, "owner role:        %s\n", rep.OwnerRole)
	fmt.Fprintf(stdout, "application roles: %s\n", listOrNone(rep.AppRoles))
	if rep.FromVersion == 0 {
		fmt.Fprintf(stdout, "marks:             %d\n", rep.Marks)
	} else {
		fmt.Fprintf(stdout, "marks:             %d (all kept)\n", rep.Marks)
	}
	fmt.Fprintf(stdout, "protected tables:  %d checked\n", rep.Tables)
	fmt.Fprintf(stdout, "DDL guard:         %s\n", onOff(rep.GuardDDL))
	for _, w := range rep.Warnings {
		fmt.Fprintf(stdout, "warning: %s\n", w)
	}
	return nil
}

func runSchemaStatus(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("fencegate schema status", flag.ContinueOnError)
	db := fs.String("db", "", dbFlagHelp)
	allowNewer := fs.Bool("allow-newer-postgres", false, allowNewerHelp)
	pos, err := parseInterspersed(fs, args, stderr)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef("unexpected argument %q", pos[0])
	}
	conn, name, err := connectDB(ctx, *db)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	st, err := pgfence.Inspect(ctx, conn)
	if err == nil {
		err = st.Server.Check(*allowNewer)
	}
	if err != nil {
		return explain(err, name)
	}
	fmt.Fprintf(stdout, "database:          %s\n", name)
	fmt.Fprintf(stdout, "PostgreSQL:        %s\n", st.Server.Text)
	if !st.Installed {
		fmt.Fprintln(stdout, "schema fencegate:  not installed")
	} else {
		v := strconv.Itoa(st.Version)
		if st.Version != pgfence.SchemaVersion {
			v += fmt.Sprintf(" (this fencegate installs %d)", pgfence.SchemaVersion)
		}
		fmt.Fprintf(stdout, "schema fencegate:  version %s, owned by %s\n", v, st.OwnerRole)
		fmt.Fprintf(stdout, "application roles: %s\n", listOrNone(st.AppRoles))
		if st.Marks >= 0 {
			fmt.Fprintf(stdout, "marks:             %d\n", st.Marks)
		}
		if st.Floor >= 0 {
			fmt.Fprintf(stdout, "floor:             %d (every fence with a token at or below it is refused)\n", st.Floor)
		}
		timeout := st.FenceTimeout
		if timeout == "" {
			timeout = "5s (default; ALTER DATABASE ... SET fencegate.fence_timeout changes it)"
		}
		fmt.Fprintf(stdout, "fence timeout:     %s\n", timeout)
		fmt.Fprintf(stdout, "DDL guard:         %s\n", onOff(st.GuardDDL))
		if sg, err := pgfence.SigningStatus(ctx, conn); err == nil {
			fmt.Fprintf(stdout, "signed tokens:     %s\n", signingLine(sg))
		}
	}
	if len(st.Tables) > 0 {
		fmt.Fprintln(stdout, "protected tables:")
		tw := tabwriter.NewWriter(stdout, 2, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  TABLE\tRESOURCE\tPROTECTED AS PART OF\tCHECKS\tOWNER")
		for _, t := range st.Tables {
			part := "-"
			if t.Root != t.Table {
				part = t.Root
			}
			checks := "statement"
			if !t.StatementChecks {
				checks = "row (run protect again)"
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\n", t.Table, t.Resource, part, checks, t.Owner)
		}
		tw.Flush()
		for _, t := range st.Tables {
			if !t.StatementChecks && t.Root == t.Table {
				continue
			}
			if !t.StatementChecks {
				fmt.Fprintf(stdout, "to give %s its statement checks: %s\n", t.Table, protectCommand(t.Root, rootResource(st.Tables, t.Root)))
			}
		}
	} else if st.Installed {
		fmt.Fprintln(stdout, "protected tables:  none (fencegate protect TABLE --resource EXPR --db DSN)")
	}
	for _, w := range st.Warnings {
		fmt.Fprintf(stdout, "warning: %s\n", w)
	}
	for _, p := range st.Problems {
		fmt.Fprintf(stdout, "problem: %s\n", p)
	}
	if len(st.Problems) > 0 {
		return fmt.Errorf("%d problem(s) in %s; each line above names its repair", len(st.Problems), name)
	}
	fmt.Fprintln(stdout, "ok: no problems")
	return nil
}

func runProtect(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("fencegate protect", flag.ContinueOnError)
	db := fs.String("db", "", dbFlagHelp)
	resource := fs.String("resource", "", "SQL expression over the table's columns naming each row's resource, e.g. \"'order:' || id\"; a constant such as \"'ledger'\" makes the table one resource (required; no default)")
	pos, err := parseInterspersed(fs, args, stderr)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usagef("want exactly one TABLE, got %d arguments: fencegate protect TABLE --resource EXPR --db DSN", len(pos))
	}
	if strings.TrimSpace(*resource) == "" {
		return usagef("missing --resource EXPR, the SQL expression naming each row's resource (e.g. --resource \"'order:' || id\")")
	}
	var warnings []string
	conn, name, err := connectDBNotices(ctx, *db, func(n *pgconn.Notice) {
		if n.Severity == "WARNING" {
			warnings = append(warnings, strings.TrimPrefix(n.Message, "fencegate: "))
		}
	})
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	if err := pgfence.Protect(ctx, conn, pos[0], *resource); err != nil {
		return explain(err, name)
	}
	st, err := pgfence.Inspect(ctx, conn)
	if err != nil {
		return explain(err, name)
	}
	n := 0
	for _, t := range st.Tables {
		if t.Root != pos[0] && !sameTable(t.Root, pos[0]) {
			continue
		}
		if n == 0 {
			fmt.Fprintf(stdout, "protected %s in %s: each row's resource is %s\n", t.Root, name, t.Resource)
		} else {
			fmt.Fprintf(stdout, "  with %s\n", t.Table)
		}
		n++
	}
	if n == 0 {
		fmt.Fprintf(stdout, "protected %s in %s\n", pos[0], name)
	}
	for _, w := range warnings {
		fmt.Fprintf(stdout, "warning: %s\n", w)
	}
	return nil
}

// rootResource is the resource expression of the protected table root.
func rootResource(tables []pgfence.ProtectedTable, root string) string {
	for _, t := range tables {
		if t.Table == root {
			return t.Resource
		}
	}
	return "EXPR"
}

// sameTable compares a schema-qualified name with what the user typed.
func sameTable(qualified, typed string) bool {
	return strings.TrimPrefix(qualified, "public.") == strings.TrimPrefix(typed, "public.")
}

func runUnprotect(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("fencegate unprotect", flag.ContinueOnError)
	db := fs.String("db", "", dbFlagHelp)
	pos, err := parseInterspersed(fs, args, stderr)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usagef("want exactly one TABLE, got %d arguments: fencegate unprotect TABLE --db DSN", len(pos))
	}
	conn, name, err := connectDB(ctx, *db)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	if err := pgfence.Unprotect(ctx, conn, pos[0]); err != nil {
		return explain(err, name)
	}
	fmt.Fprintf(stdout, "unprotected %s in %s: its writes are no longer checked\n", pos[0], name)
	return nil
}

func runMarks(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	usage := func() {
		fmt.Fprintln(stderr, "Usage: fencegate marks show [RESOURCE...] --db DSN")
		fmt.Fprintln(stderr, "       fencegate marks set RESOURCE TOKEN --db DSN [--reason TEXT]")
		fmt.Fprintln(stderr, "       fencegate marks holders --db DSN")
		fmt.Fprintln(stderr, "       fencegate marks prune --db DSN --floor N")
		fmt.Fprintln(stderr, "       fencegate marks stats --db DSN")
		fmt.Fprintln(stderr)
		fmt.Fprintln(stderr, "  show     print resources' marks (all of them when none is named)")
		fmt.Fprintln(stderr, "  set      set a mark to any token, lower included; recorded in fencegate.audit")
		fmt.Fprintln(stderr, "  holders  print the transactions holding marks locked: prepared transactions of the")
		fmt.Fprintln(stderr, "           database (held until COMMIT PREPARED or ROLLBACK PREPARED) and sessions")
		fmt.Fprintln(stderr, "           in a transaction that took a fence; other roles' sessions need a superuser")
		fmt.Fprintln(stderr, "           or pg_read_all_stats")
		fmt.Fprintln(stderr, "  prune    raise the floor to N (never lower it) and delete the marks at or below it, in")
		fmt.Fprintln(stderr, "           batches; from then on every fence with a token at or below the floor is refused")
		fmt.Fprintln(stderr, "  stats    print the number of marks, their size on disk, the floor and the oldest mark")
	}
	if len(args) == 0 {
		usage()
		return usagef("missing subcommand; use show, set or holders (marks), prune or stats (the floor)")
	}
	switch args[0] {
	case "prune":
		return runMarksPrune(ctx, args[1:], stdout, stderr)
	case "stats":
		return runMarksStats(ctx, args[1:], stdout, stderr)
	case "show", "set", "holders":
	case "-h", "--help", "help":
		usage()
		return flag.ErrHelp
	default:
		usage()
		return usagef("unknown subcommand %q; use show, set or holders (marks), prune or stats (the floor)", args[0])
	}
	sub := args[0]
	for _, a := range args[1:] {
		if _, err := strconv.ParseInt(a, 10, 64); err == nil && strings.HasPrefix(a, "-") {
			return usagef("TOKEN %s is negative; marks hold non-negative tokens", a)
		}
	}
	fs := flag.NewFlagSet("fencegate marks "+sub, flag.ContinueOnError)
	db := fs.String("db", "", dbFlagHelp)
	reason := new(string)
	if sub == "set" {
		reason = fs.String("reason", "", "why the mark is set, kept in fencegate.audit with who and when (default none)")
	}
	pos, err := parseInterspersed(fs, args[1:], stderr)
	if err != nil {
		return err
	}
	var token int64
	if sub == "holders" && len(pos) > 0 {
		return usagef("want no arguments, got %d: fencegate marks holders --db DSN", len(pos))
	}
	if sub == "set" {
		if len(pos) != 2 {
			return usagef("want RESOURCE TOKEN, got %d arguments: fencegate marks set RESOURCE TOKEN --db DSN", len(pos))
		}
		if token, err = strconv.ParseInt(pos[1], 10, 64); err != nil || token < 0 {
			return usagef("TOKEN %q is not a non-negative integer", pos[1])
		}
	}
	conn, name, err := connectDB(ctx, *db)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	if sub == "holders" {
		return printMarkHolders(ctx, conn, name, stdout)
	}
	if sub == "show" {
		marks, err := pgfence.Marks(ctx, conn, pos...)
		if err != nil {
			return explain(err, name)
		}
		tw := tabwriter.NewWriter(stdout, 2, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "RESOURCE\tTOKEN\tUPDATED_AT")
		for _, m := range marks {
			fmt.Fprintf(tw, "%s\t%d\t%s\n", strconv.Quote(m.Resource)[1:len(strconv.Quote(m.Resource))-1], m.Token, m.UpdatedAt.UTC().Format(time.RFC3339))
		}
		tw.Flush()
		if len(pos) > len(marks) {
			have := map[string]bool{}
			for _, m := range marks {
				have[m.Resource] = true
			}
			for _, r := range pos {
				if !have[r] {
					fmt.Fprintf(stderr, "fencegate marks: %q has no mark (no fence was ever taken on it)\n", r)
				}
			}
		}
		return nil
	}
	old, err := pgfence.Marks(ctx, conn, pos[0])
	if err != nil {
		return explain(err, name)
	}
	if err := pgfence.SetMark(ctx, conn, pos[0], token, *reason); err != nil {
		return explain(err, name)
	}
	from := "no mark"
	if len(old) == 1 {
		from = strconv.FormatInt(old[0].Token, 10)
	}
	fmt.Fprintf(stdout, "mark of %q in %s: %s -> %d (recorded in fencegate.audit)\n", pos[0], name, from, token)
	return nil
}

// printMarkHolders prints, one line each, the prepared transactions of the
// database and the sessions holding marks locked (pgfence.MarkHolders), and
// the warning when the server allows prepared transactions.
func printMarkHolders(ctx context.Context, conn *pgx.Conn, name string, stdout io.Writer) error {
	hs, err := pgfence.MarkHolders(ctx, conn)
	if err != nil {
		return explain(err, name)
	}
	warning, err := pgfence.PreparedWarning(ctx, conn)
	if err != nil {
		return explain(err, name)
	}
	if len(hs) == 0 {
		fmt.Fprintf(stdout, "no transaction holds marks locked in %s\n", name)
	}
	at := func(t time.Time) string {
		if t.IsZero() {
			return "unknown"
		}
		return t.UTC().Format(time.RFC3339)
	}
	for _, h := range hs {
		if h.Prepared {
			fmt.Fprintf(stdout, "prepared transaction %s: owner %s, prepared at %s (end it with COMMIT PREPARED or ROLLBACK PREPARED %s)\n",
				strconv.Quote(h.GID), orUnknown(h.Role), at(h.Since), pgQuoteLiteral(h.GID))
			continue
		}
		client := h.Client
		if client == "" {
			client = "local"
		}
		fmt.Fprintf(stdout, "session pid %d: role %s, application %s, client %s, state %s, transaction since %s\n",
			h.PID, orUnknown(h.Role), strconv.Quote(h.Application), client, orUnknown(h.State), at(h.Since))
	}
	if warning != "" {
		fmt.Fprintf(stdout, "warning: %s\n", warning)
	}
	return nil
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

// pgQuoteLiteral quotes s as an SQL string literal.
func pgQuoteLiteral(s string) string {
	return "'" + strings.ReplaceAll(s, "'", "''") + "'"
}

// connectDB connects to dsn (or $DATABASE_URL), pins the session's
// search_path (pgfence.AdminSession) and returns the connection and a name
// for messages (user@host:port/database, no password).
func connectDB(ctx context.Context, dsn string) (*pgx.Conn, string, error) {
	return connectDBNotices(ctx, dsn, nil)
}

func connectDBNotices(ctx context.Context, dsn string, onNotice func(*pgconn.Notice)) (*pgx.Conn, string, error) {
	if dsn == "" {
		dsn = os.Getenv("DATABASE_URL")
	}
	if dsn == "" {
		return nil, "", usagef("missing --db DSN: the database to act on (e.g. --db 'postgres://postgres@127.0.0.1:5432/shop'), or set DATABASE_URL")
	}
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, "", usagef("--db: cannot parse the DSN: %v", errors.Unwrap(err))
	}
	name := fmt.Sprintf("database %s at %s:%d as %s", cfg.Database, cfg.Host, cfg.Port, cfg.User)
	if onNotice != nil {
		cfg.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) { onNotice(n) }
	}
	cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	conn, err := pgx.ConnectConfig(cctx, cfg)
	if err != nil {
		var pg *pgconn.PgError
		if errors.As(err, &pg) {
			return nil, "", fmt.Errorf("cannot connect to %s: %s; check --db (user, password, database name)", name, pg.Message)
		}
		reason := strings.SplitN(err.Error(), "\n", 2)[0]
		var op *net.OpError
		if errors.As(err, &op) {
			reason = op.Err.Error()
		}
		return nil, "", fmt.Errorf("cannot connect to %s: %s; check --db and that PostgreSQL runs there", name, reason)
	}
	// Every schema, protect and marks command is an admin session: it runs
	// under search_path pg_catalog, pg_temp, so no name in its statements
	// resolves to an application's function, operator or type.
	if err := pgfence.AdminSession(cctx, conn); err != nil {
		conn.Close(context.Background())
		return nil, "", fmt.Errorf("%s: %w", name, err)
	}
	return conn, name, nil
}

// explain turns a pgfence error into one line saying what is wrong and
// what to do.
func explain(err error, name string) error {
	msg := strings.TrimPrefix(err.Error(), "pgfence: ")
	var pg *pgconn.PgError
	if errors.As(err, &pg) {
		msg = strings.TrimPrefix(pg.Message, "fencegate: ")
		if pg.Hint != "" {
			msg += " (" + pg.Hint + ")"
		}
	}
	switch {
	case errors.Is(err, pgfence.ErrNotInstalled):
		return fmt.Errorf("schema fencegate is not installed in %s: run 'fencegate schema install --db DSN' as a superuser first", name)
	case errors.Is(err, pgfence.ErrPrivilege):
		return fmt.Errorf("%s: %s; connect with --db as a superuser, or as a member of the owner role (and, for tables, their owner)", name, msg)
	case errors.Is(err, pgfence.ErrUnsupportedServer):
		return fmt.Errorf("%s: %s; upgrade the server (%s)", name, afterSentinel(err, pgfence.ErrUnsupportedServer), supportedDoc)
	case errors.Is(err, pgfence.ErrUntestedServer):
		return fmt.Errorf("%s: %s; pass --allow-newer-postgres to go on regardless (%s)", name, afterSentinel(err, pgfence.ErrUntestedServer), supportedDoc)
	}
	return errors.New(msg)
}

// supportedDoc is where the supported PostgreSQL majors are explained.
const supportedDoc = "docs/operations.md#supported-postgresql-versions"

// allowNewerHelp is the help of --allow-newer-postgres, on every command
// that checks the server's version.
var allowNewerHelp = fmt.Sprintf("go on against a PostgreSQL major newer than %d, which fencegate has not been tested on (default false: refused)", pgfence.MaxMajor)

// afterSentinel is what err says after its sentinel's text: the message
// without the operation and package prefixes ("install fencegate schema:
// pgfence: unsupported PostgreSQL version: ").
func afterSentinel(err, sentinel error) string {
	msg := err.Error()
	if i := strings.LastIndex(msg, sentinel.Error()+": "); i >= 0 {
		return msg[i+len(sentinel.Error())+2:]
	}
	return msg
}

func listOrNone(l []string) string {
	if len(l) == 0 {
		return "none (grant one with --grant ROLE)"
	}
	return strings.Join(l, ", ")
}

func onOff(b bool) string {
	if b {
		return "installed"
	}
	return "not installed (--guard-ddl, as a superuser)"
}
