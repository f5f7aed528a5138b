package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/fencegate/fencegate/internal/freeport"
	"github.com/fencegate/fencegate/internal/proc"
)

// bouncerConfig is what the generated pgbouncer.ini says.
type bouncerConfig struct {
	ListenPort   int
	Database     string // the one database served, under the same name
	UpstreamHost string
	UpstreamPort int
	AuthFile     string
	PoolSize     int // server connections per database and user
}

// ini renders the configuration: session pooling (each client keeps one
// server connection, as with the proxy and direct), trust authentication
// for the users in the auth file, TCP only, and no per-connection logging.
func (c bouncerConfig) ini() string {
	var b strings.Builder
	fmt.Fprintf(&b, "[databases]\n%s = host=%s port=%d dbname=%s\n\n", c.Database, c.UpstreamHost, c.UpstreamPort, c.Database)
	fmt.Fprintf(&b, "[pgbouncer]\n")
	for _, kv := range [][2]string{
		{"listen_addr", "127.0.0.1"},
		{"listen_port", strconv.Itoa(c.ListenPort)},
		{"unix_socket_dir", ""},
		{"auth_type", "trust"},
		{"auth_file", c.AuthFile},
		{"pool_mode", "session"},
		{"default_pool_size", strconv.Itoa(c.PoolSize)},
		{"max_client_conn", strconv.Itoa(max(100, 2*c.PoolSize))},
		{"ignore_startup_parameters", "extra_float_digits"},
		{"log_connections", "0"},
		{"log_disconnections", "0"},
		{"log_pooler_errors", "1"},
	} {
		fmt.Fprintf(&b, "%s = %s\n", kv[0], kv[1])
	}
	return b.String()
}

// authFile renders a pgbouncer auth_file listing users with no password
// (trust authentication still wants the user name listed).
func authFile(users ...string) string {
	var b strings.Builder
	for _, u := range users {
		fmt.Fprintf(&b, "%q \"\"\n", u)
	}
	return b.String()
}

// bouncerUser is the account PgBouncer runs as: it refuses to run as root,
// so root runs it as the postgres user.
func bouncerUser() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("pgbouncer refuses to run as root and there is no postgres user to run it as: %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// startBouncer writes the configuration into dir and starts PgBouncer under
// g, returning its port and process id once it answers a query.
func startBouncer(ctx context.Context, g *proc.Group, bin, dir string, up pgbenchTarget, poolSize int) (port, pid int, err error) {
	cred, err := bouncerUser()
	if err != nil {
		return 0, 0, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return 0, 0, fmt.Errorf("create pgbouncer directory: %w", err)
	}
	ports, err := freeport.Ports(1)
	if err != nil {
		return 0, 0, err
	}
	cfg := bouncerConfig{
		ListenPort: ports[0], Database: up.db, UpstreamHost: up.host, UpstreamPort: up.port,
		AuthFile: filepath.Join(dir, "users.txt"), PoolSize: poolSize,
	}
	iniPath := filepath.Join(dir, "pgbouncer.ini")
	if err := os.WriteFile(cfg.AuthFile, []byte(authFile(up.user)), 0o644); err != nil {
		return 0, 0, fmt.Errorf("write pgbouncer auth file: %w", err)
	}
	if err := os.WriteFile(iniPath, []byte(cfg.ini()), 0o644); err != nil {
		return 0, 0, fmt.Errorf("write pgbouncer.ini: %w", err)
	}
	var opts []proc.Option
	if cred != nil {
		for _, p := range []string{dir, cfg.AuthFile, iniPath} {
			if err := os.Chown(p, int(cred.Uid), int(cred.Gid)); err != nil {
				return 0, 0, fmt.Errorf("hand %s to the pgbouncer user: %w", p, err)
			}
		}
		opts = append(opts, proc.WithSetup(func(cmd *exec.Cmd) error {
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
			return nil
		}))
	}
	p, err := g.Start("pgbouncer", bin, []string{iniPath}, opts...)
	if err != nil {
		return 0, 0, err
	}
	target := up
	target.port = cfg.ListenPort
	if err := p.WaitReady(ctx, 20*time.Millisecond, 30*time.Second, sqlReady(target)); err != nil {
		return 0, 0, err
	}
	return cfg.ListenPort, p.Pid(), nil
}
