package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"strconv"
	"time"

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
	return func(ctx context.Context) error {
		conn, err := pgx.Connect(ctx, t.dsn())
		if err != nil {
			return err
		}
		defer conn.Close(context.Background())
		var one int
		return conn.QueryRow(ctx, "SELECT 1").Scan(&one)
	}
}

// createDatabase creates a database with a fresh name and returns the name.
func createDatabase(ctx context.Context, adminDSN string) (string, error) {
	b := make([]byte, 5)
	_, _ = rand.Read(b)
	name := "fg_bench_" + hex.EncodeToString(b)
	conn, err := pgx.Connect(ctx, adminDSN)
	if err != nil {
		return "", fmt.Errorf("connect to PostgreSQL at %s (is it running? make services starts it): %w", adminDSN, err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		return "", fmt.Errorf("create database %s: %w", name, err)
	}
	return name, nil
}

// dropDatabase drops the database, closing what is still connected to it.
// It does not depend on the run's context, which may be cancelled.
func dropDatabase(adminDSN, name string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, adminDSN)
	if err != nil {
		return fmt.Errorf("drop database %s: %w", name, err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
		return fmt.Errorf("drop database %s: %w", name, err)
	}
	return nil
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
