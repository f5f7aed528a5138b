// Package proxy is fencegate's PostgreSQL wire-protocol gate. It sits
// between applications and a PostgreSQL server whose tables fencegate
// protects, and it decides one thing: who may open a session.
//
// The fence itself lives in PostgreSQL (package pgfence): a transaction
// takes it first,
//
//	BEGIN;
//	SELECT fencegate.fence('order:42', 34);   -- fencegate.FenceSQL; returns 34
//	UPDATE orders SET state = 'paid' WHERE id = 42;
//	COMMIT;
//
// and PostgreSQL refuses every write to a row of a protected table unless
// the same transaction holds a standing fence on that row's resource,
// whatever the client sends and whichever way it connects. So the proxy
// reads no SQL and changes no byte: after startup it forwards each
// session's messages as they come, both ways, and the client receives
// exactly what the server sent.
//
// What the proxy adds:
//
//   - The gate. After PostgreSQL authenticated the client, and before the
//     client's first ReadyForQuery, the proxy asks PostgreSQL, on that same
//     connection, whether the session's role could switch enforcement off
//     or read what the fence rests on (a superuser, CREATEROLE,
//     REPLICATION, the owner of a protected table, of its schema or of
//     anything in schema fencegate, a member of such a role, or of
//     pg_read_all_data) and whether the database's fencegate schema is
//     sound. The role is the one the server authenticated, never the user
//     the client named, and a StartupMessage that names a key twice (the
//     server would take the last) is refused before it reaches the server,
//     as is one that asks for replication. It
//     refuses such a role with a FATAL error, SQLSTATE
//     fencegate.CodePrivilegedRole (FG007), unless
//     Config.AllowPrivilegedRoles, and an unsound schema with
//     fencegate.CodeSchemaInvalid (FG005), naming the command that repairs
//     it; with Config.AdminUpstream it repairs the schema itself, as that
//     admin role, and lets the session in.
//   - TLS on both sides, the server's own authentication (SCRAM included)
//     passed through, the server's own backend process ID given to the
//     client (only the cancel secret is the proxy's), cancel requests
//     routed to the right server session, an optional limit on how long a
//     session may stay idle in a transaction
//     (Config.IdleInTransactionTimeout),
//     a graceful shutdown that closes each session when it is idle,
//     Prometheus metrics (sessions refused, fences accepted, fencegate
//     errors by SQLSTATE and table), and health checks for load balancers
//     (Proxy.Ready, Proxy.Live: /readyz and /healthz of the fencegate
//     command).
//   - Hostile bytes (a bad length, an unknown message type) close that one
//     connection with SQLSTATE 08P01; nothing of them reaches the server.
//
// Run it with the fencegate command ("fencegate proxy --listen ...
// --upstream ...") or embed it:
//
//	p, err := proxy.New(proxy.Config{Upstream: "postgres://127.0.0.1:5432?sslmode=disable"})
//	...
//	err = p.Start()
//	...
//	defer p.Shutdown(ctx)
//
// DESIGN.md says why the proxy reads no SQL, how the gate works and what it
// cannot see, and what a session costs.
package proxy
