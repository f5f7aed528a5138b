package servers

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
)

func TestPostgresFromEnv(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
		dsn  string
		from string
	}{
		{"none", nil, "", ""},
		{"database url", map[string]string{"DATABASE_URL": "postgres://a@h:1/db", "PGHOST": "x"}, "postgres://a@h:1/db", "DATABASE_URL"},
		{"libpq", map[string]string{"PGHOST": "db.local", "PGPORT": "6000", "PGUSER": "app"},
			"postgres://app@db.local:6000/postgres?sslmode=disable", "PGHOST/PGPORT/PGUSER"},
		{"password", map[string]string{"PGPASSWORD": "s3cret", "PGDATABASE": "shop"},
			"postgres://postgres:s3cret@127.0.0.1:5432/shop?sslmode=disable", "PGPASSWORD/PGDATABASE"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dsn, from := postgresFromEnv(func(k string) string { return tc.env[k] })
			if dsn != tc.dsn || from != tc.from {
				t.Fatalf("postgresFromEnv()=%q,%q, want %q,%q", dsn, from, tc.dsn, tc.from)
			}
		})
	}
}

func noEnv(string) string { return "" }

func TestFindPostgresOrder(t *testing.T) {
	testutil.NeedServices(t)
	ctx := context.Background()
	admin := testutil.PostgresAdminDSN()
	p, err := FindPostgres(ctx, PostgresOptions{DSN: admin, Getenv: noEnv, Logger: testutil.Logger(t)})
	if err != nil || p.Source != "PostgresOptions.DSN" || p.Started() {
		t.Fatalf("FindPostgres(DSN)=%+v, %v; want the given server", p, err)
	}
	env := func(k string) string {
		if k == "DATABASE_URL" {
			return admin
		}
		return ""
	}
	p, err = FindPostgres(ctx, PostgresOptions{Getenv: env, Logger: testutil.Logger(t)})
	if err != nil || p.Source != "DATABASE_URL" {
		t.Fatalf("FindPostgres(env)=%+v, %v; want DATABASE_URL", p, err)
	}
	dead := "postgres://postgres@" + testutil.ClosedAddr(t) + "/postgres?sslmode=disable"
	_, err = FindPostgres(ctx, PostgresOptions{DSN: dead, Setting: "Config.Postgres", Getenv: noEnv, Logger: testutil.Logger(t)})
	if !errors.Is(err, ErrNoPostgres) || !strings.Contains(err.Error(), "Config.Postgres") {
		t.Fatalf("FindPostgres(dead DSN) err=%v; want ErrNoPostgres naming Config.Postgres", err)
	}
}

func TestStartPostgresMissingBinaries(t *testing.T) {
	old := postgresBinGlob
	postgresBinGlob = filepath.Join(t.TempDir(), "*", "bin")
	defer func() { postgresBinGlob = old }()
	t.Setenv("PATH", t.TempDir())
	_, err := StartPostgres(context.Background(), PostgresOptions{DataDir: t.TempDir(), Logger: testutil.Logger(t)})
	if !errors.Is(err, ErrNoPostgres) || !strings.Contains(err.Error(), "apt-get install postgresql") || !strings.Contains(err.Error(), "PostgresOptions.DSN") {
		t.Fatalf("err=%v; want ErrNoPostgres saying what to install and which setting to give", err)
	}
}

func TestStartPostgresThrowaway(t *testing.T) {
	testutil.NeedServices(t)
	ctx := context.Background()
	// Not t.TempDir(): its parent is private to root, and PostgreSQL runs as
	// an unprivileged user.
	dir, err := os.MkdirTemp("", "devstack-pg-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	p, err := StartPostgres(ctx, PostgresOptions{DataDir: dir, Logger: testutil.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c, err := pgx.Connect(ctx, p.DSN)
	if err != nil {
		t.Fatalf("connect %s: %v", p.DSN, err)
	}
	var user string
	if err := c.QueryRow(ctx, "SELECT current_user").Scan(&user); err != nil || user != "postgres" {
		t.Fatalf("current_user=%q, %v", user, err)
	}
	c.Close(ctx)
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := PingPostgres(ctx, p.DSN, ""); err == nil {
		t.Fatalf("PostgreSQL at %s still answers after Close", p.DSN)
	}
}

func TestFindAndStartRedis(t *testing.T) {
	testutil.NeedServices(t)
	ctx := context.Background()
	addr, _ := testutil.Redis(t)
	r, err := FindRedis(ctx, RedisOptions{URL: "redis://" + addr + "/0", Getenv: noEnv})
	if err != nil || r.Addr != addr || r.Started() {
		t.Fatalf("FindRedis(flag)=%+v, %v", r, err)
	}
	_, err = FindRedis(ctx, RedisOptions{Getenv: func(k string) string {
		if k == "REDIS_URL" {
			return "redis://" + testutil.FreeAddr(t)
		}
		return ""
	}})
	if !errors.Is(err, ErrNoRedis) || !strings.Contains(err.Error(), "REDIS_URL") {
		t.Fatalf("FindRedis(dead REDIS_URL) err=%v; want ErrNoRedis naming REDIS_URL", err)
	}

	s, err := StartRedis(ctx, testutil.FreeAddr(t), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	c := redis.NewClient(s.Options)
	defer c.Close()
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := s.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := s.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if n, err := c.Exists(ctx, "k").Result(); err != nil || n != 0 {
		t.Fatalf("Exists(k) after restart=%d, %v; want 0 (no persistence)", n, err)
	}
}

func TestCheckPortsNamesPortAndSetting(t *testing.T) {
	testutil.NeedServices(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	err = CheckPorts(Port{Addr: testutil.FreeAddr(t), What: "token node n1", Setting: "Config.TokenAPI"},
		Port{Addr: l.Addr().String(), What: "proxy", Setting: "Config.ProxyListen"})
	if !errors.Is(err, ErrPortInUse) || !strings.Contains(err.Error(), l.Addr().String()) || !strings.Contains(err.Error(), "Config.ProxyListen") {
		t.Fatalf("CheckPorts err=%v; want ErrPortInUse naming %s and Config.ProxyListen", err, l.Addr())
	}
	if strings.Contains(err.Error(), "token node") {
		t.Fatalf("CheckPorts blamed a free port: %v", err)
	}
	// Several taken ports are still one line, naming each port and each
	// setting once: a user reads it at a glance.
	l2, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Close()
	err = CheckPorts(Port{Addr: l.Addr().String(), What: "proxy", Setting: "--proxy-listen"},
		Port{Addr: l2.Addr().String(), What: "token node n1 API", Setting: "--token-api"},
		Port{Addr: l2.Addr().String(), What: "token node n2 API", Setting: "--token-api"})
	msg := err.Error()
	if !errors.Is(err, ErrPortInUse) || strings.Contains(msg, "\n") || strings.Count(msg, "--token-api") != 1 ||
		!strings.Contains(msg, l.Addr().String()) || !strings.Contains(msg, "token node n2 API") {
		t.Fatalf("CheckPorts with three taken = %q; want one line naming each port and each setting once", msg)
	}
}

func TestMain(m *testing.M) { testutil.Main(m) }
