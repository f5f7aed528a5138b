// Package proxy is fencegate's PostgreSQL wire-protocol proxy. It sits
// between applications and PostgreSQL and makes the database itself reject
// the writes of a lock holder whose fencing token is stale.
//
// A client fences a transaction by calling, first in it,
//
//	BEGIN;
//	SELECT fencegate.fence('order:42', 34);   -- returns 34, the accepted token
//	UPDATE orders SET state = 'paid' WHERE id = 42;
//	COMMIT;
//
// fencegate.fence is a PL/pgSQL function the proxy installs in each database
// (schema fencegate, see SchemaSQL and EnsureSchema). It advances the
// resource's high-water mark in fencegate.marks when the token is not lower
// than the mark, and keeps the mark's row locked until the transaction ends,
// so two fenced transactions on one resource serialize and a stale one fails
// before it reads anything. The errors have SQLSTATEs of their own:
//
//	FG001  CodeStaleToken  the token is lower than the resource's mark
//	FG002  CodeUnfenced    a write in a transaction that took no fence
//	FG003  CodeMisuse      a fence that protects nothing (alone in autocommit,
//	                       not first in its transaction, NULL or negative
//	                       token, empty resource)
//
// The proxy opens every upstream session with default_transaction_read_only
// on, and switches a transaction to read-write (SET TRANSACTION READ WRITE,
// sent in the same network write as the fence call) only when the client
// fences it. PostgreSQL itself then refuses every write of an unfenced
// transaction, however it is expressed (functions, writable CTEs, COPY,
// triggers, DDL, sequences); the proxy reports that refusal as FG002. Reads
// pass through untouched: the proxy adds no round trip and decodes nothing
// but the few message types it must (see DESIGN.md).
//
// Run it with the fencegate command ("fencegate proxy --listen ... --upstream
// ...") or embed it:
//
//	p, err := proxy.New(proxy.Config{Upstream: "postgres://127.0.0.1:5432?sslmode=disable"})
//	...
//	err = p.Start()
//	...
//	defer p.Shutdown(ctx)
package proxy
