// Package devstack finds or starts what fencegate needs on a developer's
// machine: a PostgreSQL server, a Redis server, and free loopback ports for
// the token nodes and the proxy. It backs "fencegate dev", the demos and
// the harness's tests and benchmarks.
//
// It also sets up what the gate proxy admits: SetupFenced installs schema
// fencegate in a database (pgfence.Install, idempotent) with its NOLOGIN
// owner role and an application LOGIN role holding the fence grants;
// FencedDB.ProtectTable gives a table to the owner role, protects it with a
// resource expression and grants the application role AppPrivileges (SELECT,
// INSERT, UPDATE, DELETE); DropRoles removes roles a run created.
//
// The whole stack comes up two ways. StartPersistent is "fencegate dev":
// fixed ports, a data directory, database (DefaultDatabase) and roles that
// outlive it and are reused by the next start. StartThrowaway is a test's
// or a demo's: free ports, a temporary data directory, a database and roles
// of random names, all gone after Close. Both set the database up and start
// the proxy with the administrator's DSN as its admin upstream.
//
// PostgreSQL is looked for, in order: the DSN given by the caller, the
// environment (DATABASE_URL, then the libpq variables
// PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE), the local default
// 127.0.0.1:5432 when it answers, and last a throwaway server started from
// the initdb and postgres binaries found on PATH or in
// /usr/lib/postgresql/*/bin, with its data in the dev data directory. When
// running as root, that server runs as the unprivileged user "postgres" (or
// "nobody"), as PostgreSQL refuses to run as root.
//
// Redis is looked for the same way: the caller's address, REDIS_URL,
// 127.0.0.1:6379 when it answers PING, and last a redis-server from PATH
// without persistence.
//
// When nothing is found, the error names what to install or which setting
// to give. Errors about a setting name the configuration field
// ("PersistentConfig.Postgres"), never a command-line flag: the command
// that fills the configuration maps fields to its flags.
// Started servers are children of the calling process: Close stops them, and
// they are killed if the process dies.
package devstack

import "errors"

var (
	// ErrNoPostgres means no PostgreSQL server answered and none could be started.
	ErrNoPostgres = errors.New("devstack: no PostgreSQL")
	// ErrNoRedis means no Redis server answered and none could be started.
	ErrNoRedis = errors.New("devstack: no Redis")
	// ErrPortInUse means a port the stack needs is taken by another program.
	ErrPortInUse = errors.New("devstack: port in use")
)
