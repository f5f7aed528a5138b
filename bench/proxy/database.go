package main

import (
	"context"
	"fmt"
	"net/url"
	"strconv"

	"github.com/fencegate/fencegate/internal/servers"
	"github.com/jackc/pgx/v5"
)

// upstreamTarget returns host, port and user of the admin DSN, with db as
// the database.
func upstreamTarget(adminDSN, db string) (pgbenchTarget, error) {
	cfg, err := pgx.ParseConfig(adminDSN)
	if err != nil {
		return pgbenchTarget{}, fmt.Errorf("parse --postgres %q: %w", adminDSN, err)
	}
	return pgbenchTarget{host: cfg.Host, port: int(cfg.Port), user: cfg.User, db: db}, nil
}

// dsn is the URL of target with TLS off.
func (t pgbenchTarget) dsn() string {
	u := url.URL{
		Scheme:   "postgres",
		User:     url.User(t.user),
		Host:     t.host + ":" + strconv.Itoa(t.port),
		Path:     "/" + t.db,
		RawQuery: "sslmode=disable",
	}
	return u.String()
}

// sqlReady is a readiness check: a connection to t answers SELECT 1.
func sqlReady(t pgbenchTarget) func(context.Context) error {
	return func(ctx context.Context) error { return servers.PingPostgres(ctx, t.dsn(), "") }
}

// serverVersion returns PostgreSQL's version string.
func serverVersion(ctx context.Context, t pgbenchTarget) string {
	conn, err := pgx.Connect(ctx, t.dsn())
	if err != nil {
		return "unknown"
	}
	defer conn.Close(context.Background())
	var v string
	if err := conn.QueryRow(ctx, "SHOW server_version").Scan(&v); err != nil {
		return "unknown"
	}
	return "PostgreSQL " + v
}
