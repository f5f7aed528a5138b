package servers

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/fencegate/fencegate/internal/freeport"
	"github.com/fencegate/fencegate/internal/pgdb"
	"github.com/jackc/pgx/v5"
)

// Postgres is a PostgreSQL server the stack uses.
type Postgres struct {
	// DSN connects as the administrator: the stack and the demo create
	// databases and roles and install schema fencegate, which takes a
	// superuser.
	DSN string
	// Source says where it came from, for the user (PostgresOptions.Setting
	// for a DSN given, "DATABASE_URL", "local server", "started by
	// fencegate in DIR").
	Source string
	srv    *server
}

// Started reports whether the server was started by FindPostgres.
func (p *Postgres) Started() bool { return p.srv != nil }

// Close stops a server FindPostgres started (fast shutdown); it does nothing
// for a server that was already running.
func (p *Postgres) Close() error {
	if p == nil || p.srv == nil {
		return nil
	}
	return p.srv.stop(syscall.SIGINT, 15*time.Second)
}

// PostgresOptions says where to look for PostgreSQL.
type PostgresOptions struct {
	// DSN, when set, is used as is.
	DSN string
	// Setting names the caller's setting that gives DSN, in error messages
	// and as Postgres.Source. The default is "PostgresOptions.DSN".
	Setting string
	// DataDir is where a started server keeps its data (DataDir/postgres).
	// Required only when a server has to be started.
	DataDir string
	// DataDirSetting names the caller's setting that gives DataDir, in
	// error messages. The default is "PostgresOptions.DataDir".
	DataDirSetting string
	// Getenv reads the environment. The default is os.Getenv.
	Getenv func(string) string
	// Logger gets progress messages. The default is slog.Default().
	Logger *slog.Logger
}

// FindPostgres returns the PostgreSQL server to use, starting one when none
// answers (see the package documentation for the order).
func FindPostgres(ctx context.Context, o PostgresOptions) (*Postgres, error) {
	o.defaults()
	if o.Getenv == nil {
		o.Getenv = os.Getenv
	}
	if o.Logger == nil {
		o.Logger = slog.Default().With("component", "devstack")
	}
	if o.DSN != "" {
		if err := PingPostgres(ctx, o.DSN, ""); err != nil {
			return nil, fmt.Errorf("%w: %s %s does not answer: %v", ErrNoPostgres, o.Setting, Redact(o.DSN), err)
		}
		return &Postgres{DSN: o.DSN, Source: o.Setting}, nil
	}
	if dsn, from := postgresFromEnv(o.Getenv); dsn != "" {
		if err := PingPostgres(ctx, dsn, ""); err != nil {
			return nil, fmt.Errorf("%w: %s names %s, which does not answer: %v (fix it, unset it, or pass %s)", ErrNoPostgres, from, Redact(dsn), err, o.Setting)
		}
		return &Postgres{DSN: dsn, Source: from}, nil
	}
	err := PingPostgres(ctx, pgdb.DefaultAdminDSN, "")
	if err == nil {
		return &Postgres{DSN: pgdb.DefaultAdminDSN, Source: "local server"}, nil
	}
	if !refused(err) {
		// Something listens on 5432 but will not let us in: starting another
		// server would not help.
		return nil, fmt.Errorf("%w: 127.0.0.1:5432 answers but refuses user postgres without a password (%v); pass %s DSN or set DATABASE_URL", ErrNoPostgres, err, o.Setting)
	}
	return StartPostgres(ctx, o)
}

func (o *PostgresOptions) defaults() {
	if o.Setting == "" {
		o.Setting = "PostgresOptions.DSN"
	}
	if o.DataDirSetting == "" {
		o.DataDirSetting = "PostgresOptions.DataDir"
	}
}

// StartPostgres starts a throwaway PostgreSQL server with its data in
// o.DataDir/postgres (reused when it already holds a cluster), on
// 127.0.0.1:5432 or, when that port is taken, a free one.
func StartPostgres(ctx context.Context, o PostgresOptions) (*Postgres, error) {
	o.defaults()
	if o.Logger == nil {
		o.Logger = slog.Default().With("component", "devstack")
	}
	bin, err := PostgresBinDir()
	if err != nil {
		return nil, fmt.Errorf("%w: nothing answers at 127.0.0.1:5432 and %v; install PostgreSQL (Debian/Ubuntu: apt-get install postgresql) or pass %s DSN", ErrNoPostgres, err, o.Setting)
	}
	if o.DataDir == "" {
		return nil, fmt.Errorf("%w: nothing answers at 127.0.0.1:5432 and no data directory to start one in; pass %s DSN", ErrNoPostgres, o.Setting)
	}
	return startPostgres(ctx, bin, o)
}

// postgresFromEnv builds a DSN from DATABASE_URL or the libpq PG* variables.
func postgresFromEnv(getenv func(string) string) (dsn, from string) {
	if v := getenv("DATABASE_URL"); v != "" {
		return v, "DATABASE_URL"
	}
	vars := []string{"PGHOST", "PGPORT", "PGUSER", "PGPASSWORD", "PGDATABASE"}
	var set []string
	for _, v := range vars {
		if getenv(v) != "" {
			set = append(set, v)
		}
	}
	if len(set) == 0 {
		return "", ""
	}
	host, port := getenv("PGHOST"), getenv("PGPORT")
	if host == "" {
		host = "127.0.0.1"
	}
	if port == "" {
		port = "5432"
	}
	u := url.URL{Scheme: "postgres", Host: net.JoinHostPort(host, port), Path: "/" + firstNonEmpty(getenv("PGDATABASE"), "postgres")}
	if strings.HasPrefix(host, "/") { // a Unix socket directory
		u.Host = ""
		q := url.Values{"host": {host}, "port": {port}}
		u.RawQuery = q.Encode()
	}
	usr := firstNonEmpty(getenv("PGUSER"), "postgres")
	if pw := getenv("PGPASSWORD"); pw != "" {
		u.User = url.UserPassword(usr, pw)
	} else {
		u.User = url.User(usr)
	}
	if u.RawQuery == "" {
		u.RawQuery = "sslmode=" + firstNonEmpty(getenv("PGSSLMODE"), "disable")
	}
	return u.String(), strings.Join(set, "/")
}

func firstNonEmpty(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}

// PingPostgres connects to dsn, as password when it is not empty, and runs
// SELECT 1, within 3 seconds: it tells a PostgreSQL server, or a proxy in
// front of one, that serves.
func PingPostgres(ctx context.Context, dsn, password string) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return err
	}
	if password != "" {
		cfg.Password = password
	}
	c, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer c.Close(context.WithoutCancel(ctx))
	var one int
	return c.QueryRow(ctx, "SELECT 1").Scan(&one)
}

// refused reports whether err means nothing listens (as opposed to a server
// that answered and said no).
func refused(err error) bool {
	return errors.Is(err, syscall.ECONNREFUSED) || strings.Contains(err.Error(), "connection refused")
}

// postgresBinGlob is where distributions put the server binaries.
var postgresBinGlob = pgdb.DistroBinGlob

// PostgresBinDir finds a directory holding both initdb and postgres: the
// server binaries StartPostgres runs.
func PostgresBinDir() (string, error) {
	if p, err := exec.LookPath("postgres"); err == nil {
		dir := filepath.Dir(p)
		if _, err := os.Stat(filepath.Join(dir, "initdb")); err == nil {
			return dir, nil
		}
	}
	if dirs := pgdb.ServerBinDirs(postgresBinGlob); len(dirs) > 0 {
		return dirs[0], nil
	}
	return "", errors.New("no PostgreSQL server binaries (postgres, initdb) on PATH or in /usr/lib/postgresql/*/bin")
}

// startPostgres initializes DataDir/postgres when needed and starts a server
// on 127.0.0.1:5432 (or a free port when 5432 is taken).
func startPostgres(ctx context.Context, bin string, o PostgresOptions) (*Postgres, error) {
	dir, err := filepath.Abs(filepath.Join(o.DataDir, "postgres"))
	if err != nil {
		return nil, err
	}
	cred, owner, err := pgdb.ServerCredential()
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNoPostgres, err)
	}
	if cred != nil && !traversable(filepath.Dir(dir), cred) {
		return nil, fmt.Errorf("%w: user %s cannot reach %s to run PostgreSQL there; use a data directory outside home directories (%s) or pass %s DSN", ErrNoPostgres, owner, dir, o.DataDirSetting, o.Setting)
	}
	if _, err := os.Stat(filepath.Join(dir, "PG_VERSION")); err != nil {
		o.Logger.Info("initializing a throwaway PostgreSQL", "dir", dir, "bin", bin)
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, fmt.Errorf("create %s: %w", dir, err)
		}
		if cred != nil {
			if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
				return nil, fmt.Errorf("chown %s: %w", dir, err)
			}
		}
		cmd := exec.CommandContext(ctx, filepath.Join(bin, "initdb"), "-D", dir, "-U", "postgres",
			"--auth=trust", "-E", "UTF8", "--no-sync", "--no-instructions")
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
		if out, err := cmd.CombinedOutput(); err != nil {
			os.RemoveAll(dir)
			return nil, fmt.Errorf("%w: initdb %s: %v\n%s", ErrNoPostgres, dir, err, tail(string(out), 2000))
		}
	}
	addr := "127.0.0.1:5432"
	if !PortFree(addr) {
		addrs, err := freeport.Loopback(1)
		if err != nil {
			return nil, err
		}
		addr = addrs[0]
	}
	_, port, _ := net.SplitHostPort(addr)
	dsn := "postgres://postgres@" + addr + "/postgres?sslmode=disable"
	srv, err := startServer(ctx, "postgres", filepath.Join(bin, "postgres"), []string{"-D", dir, "-p", port,
		"-c", "listen_addresses=127.0.0.1", "-c", "unix_socket_directories=",
		"-c", "fsync=off", "-c", "max_connections=200"},
		func(cmd *exec.Cmd) error { cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}; return nil },
		60*time.Second, func(ctx context.Context) error { return PingPostgres(ctx, dsn, "") })
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNoPostgres, err)
	}
	o.Logger.Info("started PostgreSQL", "addr", addr, "dir", dir)
	return &Postgres{DSN: dsn, Source: "started by fencegate in " + dir, srv: srv}, nil
}

// traversable reports whether every directory from dir up to / can be
// entered by the user (world- or group-executable, or owned by it).
func traversable(dir string, c *syscall.Credential) bool {
	for d := dir; ; d = filepath.Dir(d) {
		var st syscall.Stat_t
		if err := syscall.Stat(d, &st); err == nil {
			ok := st.Mode&0o001 != 0 || (st.Gid == c.Gid && st.Mode&0o010 != 0) || (st.Uid == c.Uid && st.Mode&0o100 != 0)
			if !ok {
				return false
			}
		}
		if d == "/" || d == "." {
			return true
		}
	}
}

// Redact hides a DSN's password.
func Redact(dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil || u.User == nil {
		return dsn
	}
	if _, ok := u.User.Password(); ok {
		u.User = url.UserPassword(u.User.Username(), "xxxxx")
	}
	return u.String()
}
