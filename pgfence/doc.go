// Package pgfence is the half of fencegate that lives in PostgreSQL: schema
// fencegate (the marks, the fence, the checks of protected tables), its
// installation and upgrade, protect and unprotect, the marks' administration
// and the two catalog queries the gate runs (PrivilegeQuery, HealthQuery).
//
// The contract PostgreSQL enforces once a table is protected: a fence guards
// exactly its resource, in exactly its transaction. A transaction runs
// fencegate.FenceSQL (SELECT fencegate.fence(resource, token)) first; the
// fence check-and-advances the resource's mark (equal tokens accepted, a
// lower one refused with FG001, and so is any token at or below the
// database's floor, below which marks are pruned), keeps the mark's row lock to the end of the
// transaction and records that this top-level transaction, on this running
// server, holds it. Every write to a row of a protected table (INSERT, the
// old and the new row of an UPDATE, DELETE, MERGE, COPY FROM; directly, or
// through a view, rule, cascade, function or procedure; to the table, its
// partitions or its children; by any role, through any protocol, also the
// logical replication apply worker) is refused with FG002 unless the writing
// transaction holds a standing fence on the row's resource. TRUNCATE is
// refused. A rollback, to a savepoint too, undoes a fence.
//
// The schema belongs to a role nobody logs in as (InstallOptions.OwnerRole);
// applications get EXECUTE on the fence functions and SELECT on the marks,
// nothing else. pgfence/DESIGN.md argues why no message a client can
// send gets a write past the checks, and what stays unprotected.
//
// What the package offers, each also a command of the fencegate binary:
//
//	Install, Inspect          fencegate schema install|upgrade|status
//	Protect, Unprotect        fencegate protect|unprotect
//	Marks, SetMark, Audit     fencegate marks show|set
//	Prune, Floor, Stats       fencegate marks prune|stats: raise the floor, delete the marks below it
//	PrivilegeQuery            the gate's startup check of a session's role
//	HealthQuery               one catalog query listing every problem with its repair
//	RequireSigned, AllowUnsigned, SigningStatus
//	                          fencegate schema require-signed [--off]: fences then need
//	                          tokens the token service signed (package tokensign)
//
// Errors wrap a sentinel (ErrPrivilege, ErrBadInput, ErrNotInstalled, ...)
// and keep the database's *pgconn.PgError, with its message and hint,
// reachable through errors.As. The SQLSTATEs are in package fencegate.
package pgfence
