// Package devstack runs the whole fencegate stack on one machine for the
// fencegate binary: package internal/servers finds or starts PostgreSQL and
// Redis; this package starts the token nodes and the proxy in the binary's
// process (StartTokens, StartProxy) and puts them together, with a database
// set up for applications. It backs "fencegate dev" and the demos.
//
// Of fencegate's three ways to run the whole stack, this is the binary's:
// it needs no test and no Go toolchain, keeps its data where the user says,
// and finds what already runs on the machine. A test starts its stack with
// package fencegatetest instead (in the test's process, gone at its end),
// and the fault campaign with faults.StartStack (every server a child
// process, so that it can be killed, frozen and restarted).
//
// It sets up what the gate proxy admits: SetupFenced installs schema
// fencegate in a database (pgfence.Install, idempotent) with its NOLOGIN
// owner role and an application LOGIN role holding the fence grants;
// FencedDB.Protect gives a table to the owner role, protects it with a
// resource expression and grants the application role fenceddb.AppPrivileges (SELECT,
// INSERT, UPDATE, DELETE); pgdb.DropRoles removes roles a run created.
//
// The whole stack comes up two ways. StartPersistent is "fencegate dev":
// fixed ports, a data directory, database (DefaultDatabase) and roles that
// outlive it and are reused by the next start. StartThrowaway is a test's
// or a demo's: free ports, a temporary data directory, a database and roles
// of random names, all gone after Close. Both set the database up and start
// the proxy with the administrator's DSN as its admin upstream.
//
// Errors about a setting name the configuration field
// ("PersistentConfig.Postgres"), never a command-line flag: the command
// that fills the configuration maps fields to its flags.
package devstack
