// Command instructions counts the CPU instructions PostgreSQL spends on a
// fenced write against the same write unfenced, under valgrind's callgrind,
// in single-user mode: one backend, no network and no other process, so
// the counts repeat from run to run on a shared machine where times and CPU
// seconds drift with the neighbours.
//
//	go run ./instructions [--writes 200] [--rows 20000] [--resources 1,1000] [--keep]
//
// It starts a throwaway PostgreSQL (initdb in a temporary directory, the
// server binaries of this host), installs schema fencegate, creates the
// protected table and its unprotected twin of package fencebench, stops
// the server, then feeds SQL scripts to "postgres --single" under
// callgrind. A figure is per transaction in the steady state: the
// difference between a run of 2N transactions and a run of N, divided by N,
// so that starting the backend and the first use of each function and
// table (caches, plpgsql compilation) cancel out.
//
// The rows:
//
//   - a one-row UPDATE transaction: unfenced on the twin (BEGIN, UPDATE,
//     COMMIT), fenced on the twin (the fence's own cost) and fenced on the
//     protected table (the fence and the checks);
//   - INSERT ... SELECT, COPY and UPDATE of --rows rows in one transaction,
//     fenced on both tables (the checks' cost), the rows of one resource,
//     then spread over the second --resources figure.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/fencegate/fencegate/bench"
	"github.com/fencegate/fencegate/internal/fencebench"
	"github.com/fencegate/fencegate/internal/pgdb"
	"github.com/fencegate/fencegate/internal/servers"
	"github.com/fencegate/fencegate/pgfence"
	"github.com/jackc/pgx/v5"
)

func main() { bench.Main("bench instructions", run) }

type options struct {
	writes, rows int
	resources    bench.IntList
	keep         bool
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("instructions", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o options
	fs.IntVar(&o.writes, "writes", 200, "one-row transactions per counted run (N; the run of 2N is counted too)")
	fs.IntVar(&o.rows, "rows", 20000, "rows of each bulk INSERT ... SELECT, COPY and UPDATE")
	o.resources = bench.IntList{1, 1000}
	fs.Var(&o.resources, "resources", "comma-separated `LIST` of how many resources the bulk rows are spread over")
	fs.BoolVar(&o.keep, "keep", false, "keep the temporary directory (cluster, scripts, callgrind files)")
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return err
		}
		return bench.UsageError{Err: err}
	}
	if fs.NArg() > 0 {
		return bench.Usagef("unexpected argument %q", fs.Arg(0))
	}
	if o.writes < 1 || o.rows < 1 || len(o.resources) == 0 || o.resources[0] < 1 {
		return bench.Usagef("--writes, --rows and every --resources must be positive")
	}
	logf := func(format string, a ...any) { fmt.Fprintf(stderr, format+"\n", a...) }
	valgrind, err := bench.LookPath("valgrind", "valgrind")
	if err != nil {
		return err
	}
	ws, err := bench.NewWorkspace("fencegate-bench-instructions-", o.keep, "cluster, scripts, callgrind files", stderr)
	if err != nil {
		return err
	}
	defer ws.Cleanup.Run()
	// The server runs as the postgres user when this runs as root: it must
	// reach the data directory and read the COPY files.
	if err := os.Chmod(ws.Dir, 0o755); err != nil {
		return err
	}
	cred, _, err := pgdb.ServerCredential()
	if err != nil {
		return err
	}
	logf("starting a throwaway PostgreSQL in %s", ws.Dir)
	pg, err := servers.StartPostgres(ctx, servers.PostgresOptions{DataDir: ws.Dir, DataDirSetting: "the temporary directory"})
	if err != nil {
		return err
	}
	version, err := prepare(ctx, pg.DSN, o)
	if cerr := pg.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	bin, err := servers.PostgresBinDir()
	if err != nil {
		return err
	}
	c := &counter{valgrind: valgrind, postgres: filepath.Join(bin, "postgres"), data: filepath.Join(ws.Dir, "postgres"), dir: ws.Dir, cred: cred, logf: logf}
	rows, err := measure(ctx, c, o)
	if err != nil {
		return err
	}
	return report(stdout, o, version, rows)
}

// The database the scripts run in, and the id of the first bulk row (the
// rows below it are fencebench's one row per account).
const (
	dbName    = "instructions"
	accounts  = 1000
	firstBulk = accounts + 1
)

// prepare creates the database, the schema and the tables, and the rows the
// bulk UPDATEs rewrite (ids from firstBulk on, for each resource count, in
// a table of their own so that every UPDATE meets the same rows).
func prepare(ctx context.Context, adminDSN string, o options) (string, error) {
	admin, err := pgx.Connect(ctx, adminDSN)
	if err != nil {
		return "", err
	}
	defer admin.Close(context.Background())
	var version string
	if err := admin.QueryRow(ctx, "SELECT current_setting('server_version')").Scan(&version); err != nil {
		return "", err
	}
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+dbName); err != nil {
		return "", err
	}
	dsn := pgdb.WithDatabase(adminDSN, dbName)
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return "", err
	}
	defer conn.Close(context.Background())
	if _, err := pgfence.Install(ctx, conn, pgfence.InstallOptions{}); err != nil {
		return "", err
	}
	if err := fencebench.Setup(ctx, conn, accounts); err != nil {
		return "", err
	}
	return version, nil
}

// counter runs scripts under callgrind.
type counter struct {
	valgrind, postgres, data, dir string
	cred                          *syscall.Credential
	logf                          func(string, ...any)
	n                             int
}

// count returns the instructions postgres --single spent running script.
func (c *counter) count(ctx context.Context, script string) (int64, error) {
	c.n++
	in := filepath.Join(c.dir, fmt.Sprintf("script-%d.sql", c.n))
	out := filepath.Join(c.dir, fmt.Sprintf("callgrind-%d.out", c.n))
	// In single-user mode with -j, a statement ends at a semicolon
	// followed by an empty line: each one is then a query of its own, as
	// a client sends it.
	script = strings.ReplaceAll(script, ";\n", ";\n\n")
	if err := os.WriteFile(in, []byte(script), 0o644); err != nil {
		return 0, err
	}
	f, err := os.Open(in)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	cmd := exec.CommandContext(ctx, c.valgrind, "--tool=callgrind", "--callgrind-out-file="+out,
		c.postgres, "--single", "-j", "-D", c.data, "-c", "fsync=off", dbName)
	cmd.Stdin = f
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred}
	if c.cred != nil {
		// The callgrind file is written by the server's user.
		if err := os.Chown(c.dir, int(c.cred.Uid), int(c.cred.Gid)); err != nil {
			return 0, err
		}
	}
	stdout, err := cmd.CombinedOutput()
	if err != nil {
		return 0, fmt.Errorf("postgres --single under callgrind: %v\n%s", err, tail(string(stdout)))
	}
	// Single-user mode prints errors and goes on: any ERROR makes the
	// count that of another workload.
	if i := strings.Index(string(stdout), "ERROR:"); i >= 0 {
		return 0, fmt.Errorf("script %s failed: %s", in, tail(string(stdout[i:])))
	}
	return totals(out)
}

// totals reads the instruction count from a callgrind output file.
func totals(path string) (int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		for _, p := range []string{"summary: ", "totals: "} {
			if v, ok := strings.CutPrefix(line, p); ok {
				return strconv.ParseInt(strings.Fields(v)[0], 10, 64)
			}
		}
	}
	return 0, fmt.Errorf("%s: no totals line", path)
}

func tail(s string) string {
	if len(s) > 2000 {
		return "..." + s[len(s)-2000:]
	}
	return s
}

// perTx is the steady-state count of one transaction: script(n) builds a
// script of n transactions.
func (c *counter) perTx(ctx context.Context, n int, script func(n int) string) (int64, error) {
	one, err := c.count(ctx, script(n))
	if err != nil {
		return 0, err
	}
	two, err := c.count(ctx, script(2*n))
	if err != nil {
		return 0, err
	}
	return (two - one) / int64(n), nil
}

// row is one line of the report: instructions per transaction on each
// side (unfenced is 0 where the workload is only run fenced).
type row struct {
	name                      string
	unfenced, twin, protected int64
}

// scripts writes the SQL of the workloads, with tokens that grow over the
// whole command (the database keeps its marks from run to run) and bulk
// ids that are never used twice.
type scripts struct {
	dir    string
	token  int64
	nextID int64
	files  int
	err    error // the first COPY file that could not be written
}

func (s *scripts) tok() int64 { s.token++; return s.token }

// fence is the statement that fences the resources of rows spread over
// res accounts (row g of account g mod res).
func (s *scripts) fence(res int) string {
	if res == 1 {
		return fmt.Sprintf("SELECT fencegate.fence('acct:0', %d);\n", s.tok())
	}
	return fmt.Sprintf("SELECT fencegate.fence_many(array_agg('acct:' || g), %d) FROM generate_series(0, %d) g;\n", s.tok(), res-1)
}

func (s *scripts) oneRow(table string, fenced bool) func(n int) string {
	return func(n int) string {
		var b strings.Builder
		for i := range n {
			id := i%accounts + 1
			b.WriteString("BEGIN;\n")
			if fenced {
				fmt.Fprintf(&b, "SELECT fencegate.fence('acct:%d', %d);\n", id, s.tok())
			}
			fmt.Fprintf(&b, "UPDATE %s SET n = n + 1 WHERE id = %d;\nCOMMIT;\n", table, id)
		}
		return b.String()
	}
}

func (s *scripts) insertSelect(table string, rows, res int) func(n int) string {
	return func(n int) string {
		var b strings.Builder
		for range n {
			first := s.ids(rows)
			fmt.Fprintf(&b, "BEGIN;\n%sINSERT INTO %s (id, acct, note) SELECT g, g %% %d, 'bulk' FROM generate_series(%d, %d) g;\nCOMMIT;\n",
				s.fence(res), table, res, first, first+int64(rows)-1)
		}
		return b.String()
	}
}

func (s *scripts) copyIn(table string, rows, res int) func(n int) string {
	return func(n int) string {
		var b strings.Builder
		for range n {
			first := s.ids(rows)
			s.files++
			path := filepath.Join(s.dir, fmt.Sprintf("copy-%d.txt", s.files))
			if err := os.WriteFile(path, []byte(fencebench.CopyData(first, rows, res)), 0o644); err != nil && s.err == nil {
				s.err = err
			}
			fmt.Fprintf(&b, "BEGIN;\n%sCOPY %s (id, acct, note) FROM '%s';\nCOMMIT;\n", s.fence(res), table, path)
		}
		return b.String()
	}
}

// update rewrites the rows of [first, first+rows), after a VACUUM that
// leaves every run the same pages to start from.
func (s *scripts) update(table string, first int64, rows, res int) func(n int) string {
	return func(n int) string {
		var b strings.Builder
		fmt.Fprintf(&b, "VACUUM %s;\n", table)
		for range n {
			fmt.Fprintf(&b, "BEGIN;\n%sUPDATE %s SET n = n + 1 WHERE id >= %d AND id < %d;\nCOMMIT;\n",
				s.fence(res), table, first, first+int64(rows))
		}
		return b.String()
	}
}

// ids reserves n bulk ids and returns the first.
func (s *scripts) ids(n int) int64 {
	if s.nextID == 0 {
		s.nextID = firstBulk
	}
	first := s.nextID
	s.nextID += int64(n)
	return first
}

func measure(ctx context.Context, c *counter, o options) ([]row, error) {
	s := &scripts{dir: c.dir}
	var out []row
	c.logf("one-row transactions: %d and %d per run", o.writes, 2*o.writes)
	one := row{name: "one-row UPDATE transaction"}
	for _, side := range []struct {
		into   *int64
		table  string
		fenced bool
	}{{&one.unfenced, fencebench.Unprotected, false}, {&one.twin, fencebench.Unprotected, true}, {&one.protected, fencebench.Protected, true}} {
		n, err := c.perTx(ctx, o.writes, s.oneRow(side.table, side.fenced))
		if err != nil {
			return nil, err
		}
		*side.into = n
	}
	out = append(out, one)
	for _, res := range o.resources {
		spread := "1 resource"
		if res > 1 {
			spread = fmt.Sprintf("%d resources", res)
		}
		c.logf("bulk writes of %d rows, %s", o.rows, spread)
		ins := row{name: fmt.Sprintf("INSERT ... SELECT of %d rows, %s", o.rows, spread)}
		cp := row{name: fmt.Sprintf("COPY of %d rows, %s", o.rows, spread)}
		up := row{name: fmt.Sprintf("UPDATE of %d rows, %s", o.rows, spread)}
		for _, t := range []struct {
			table       string
			ins, cp, up *int64
		}{{fencebench.Unprotected, &ins.twin, &cp.twin, &up.twin}, {fencebench.Protected, &ins.protected, &cp.protected, &up.protected}} {
			var err error
			if *t.ins, err = c.perTx(ctx, 1, s.insertSelect(t.table, o.rows, res)); err != nil {
				return nil, err
			}
			if *t.cp, err = c.perTx(ctx, 1, s.copyIn(t.table, o.rows, res)); err == nil {
				err = s.err
			}
			if err != nil {
				return nil, err
			}
			// The rows the UPDATEs rewrite, inserted once (not counted).
			first := s.nextID
			if _, err := c.count(ctx, s.insertSelect(t.table, o.rows, res)(1)); err != nil {
				return nil, err
			}
			if *t.up, err = c.perTx(ctx, 1, s.update(t.table, first, o.rows, res)); err != nil {
				return nil, err
			}
		}
		out = append(out, ins, cp, up)
	}
	return out, nil
}

func report(w io.Writer, o options, version string, rows []row) error {
	fmt.Fprintf(w, "\ninstructions per transaction in PostgreSQL %s (single-user mode under callgrind; the steady state: a run of 2N\n"+
		"transactions less a run of N, over N; N = %d for one-row transactions, 1 for bulk ones)\n\n", version, o.writes)
	t := bench.NewTable("workload", "unfenced", "fenced, twin", "fenced, protected", "protected / twin", "fenced protected / unfenced").Labels(1)
	for _, r := range rows {
		unf, whole := "", ""
		if r.unfenced > 0 {
			unf = group(r.unfenced)
			whole = fmt.Sprintf("%.2fx", float64(r.protected)/float64(r.unfenced))
		}
		t.Row(r.name, unf, group(r.twin), group(r.protected), fmt.Sprintf("%.3fx", float64(r.protected)/float64(r.twin)), whole)
	}
	if _, err := t.WriteTo(w); err != nil {
		return err
	}
	fmt.Fprintf(w, "\nunfenced: BEGIN, the UPDATE on the unprotected twin, COMMIT. fenced, twin: the same with\n"+
		"fencegate.fence (fence_many for several resources) first: what the fence costs. fenced, protected: the\n"+
		"same on the protected table: the fence and the checks.\n")
	return nil
}

// group writes n with thousands separators.
func group(n int64) string {
	s := strconv.FormatInt(n, 10)
	var b strings.Builder
	for i, r := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(r)
	}
	return b.String()
}
