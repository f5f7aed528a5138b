// Package servers finds or starts the servers a fencegate stack runs
// beside on one machine: PostgreSQL and Redis (found running or started as
// children of this process), and checks the ports they listen on. It
// imports nothing of fencegate's product packages, so that the dev stack,
// the fault campaign, the tests and the benchmarks can all use it; the
// stacks that start fencegate's own servers (the token nodes, the proxy)
// sit above it.
//
// PostgreSQL is looked for, in order: the DSN given by the caller, the
// environment (DATABASE_URL, then the libpq variables PGHOST, PGPORT,
// PGUSER, PGPASSWORD, PGDATABASE), the local default 127.0.0.1:5432 when it
// answers, and last a throwaway server started from the initdb and postgres
// binaries found on PATH or in /usr/lib/postgresql/*/bin, with its data in
// the caller's data directory. When running as root, that server runs as
// the unprivileged user "postgres" (or "nobody"), as PostgreSQL refuses to
// run as root.
//
// Redis is looked for the same way: the caller's address, REDIS_URL,
// 127.0.0.1:6379 when it answers PING, and last a redis-server from PATH
// without persistence.
//
// When nothing is found, the error names what to install or which of the
// caller's settings to give (PostgresOptions.Setting, RedisOptions.Setting,
// Port.Setting). Started servers are children of the calling process:
// Close stops them, and they are killed if the process dies.
package servers

import "errors"

var (
	// ErrNoPostgres means no PostgreSQL server answered and none could be started.
	ErrNoPostgres = errors.New("devstack: no PostgreSQL")
	// ErrNoRedis means no Redis server answered and none could be started.
	ErrNoRedis = errors.New("devstack: no Redis")
	// ErrPortInUse means a port the stack needs is taken by another program.
	ErrPortInUse = errors.New("devstack: port in use")
)
