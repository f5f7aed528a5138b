// Package fencegate holds the vocabulary every part of fencegate shares: the
// SQLSTATEs PostgreSQL raises when it refuses a write, and the statements a
// client sends to take a fence.
//
// The contract, enforced by PostgreSQL itself once a table is protected (see
// package pgfence): a fence guards exactly its resource, in exactly its
// transaction. A transaction first runs FenceSQL (or FenceManySQL) with the
// lock's resource and fencing token; the fence check-and-advances the
// resource's high-water mark, keeps the mark's row lock until the transaction
// ends and records that this transaction holds it. Every write to a row of a
// protected table is then refused unless the same transaction holds a
// standing fence on that row's resource. A rollback (also to a savepoint)
// undoes the fence with everything else.
//
// All codes are in class FG, which PostgreSQL itself never emits. A client
// reads them from the ErrorResponse's SQLSTATE (pgconn.PgError.Code in pgx,
// pgcode in psycopg); the message names the resource, the tokens or the
// table involved, and the hint says what to do.
package fencegate

// SQLSTATEs raised by the fencegate schema and the fencegate gate. Every one
// aborts the statement (and so the transaction) it is raised in; nothing the
// transaction did commits.
const (
	// CodeStaleToken (FG001): the offered token is lower than the last one
	// accepted for the resource: a newer lock holder has written it. Not
	// retryable with the same token: the holder has lost its lock and must
	// give up (or take the lock again, which yields a new token, and re-read).
	CodeStaleToken = "FG001"

	// CodeUnfenced (FG002): a write (INSERT, UPDATE's old or new row,
	// DELETE, MERGE, COPY FROM) to a row of a protected table in a
	// transaction that holds no standing fence on that row's resource. The
	// message names the table and the row's resource. Not retryable as is:
	// the client takes the lock, then runs FenceSQL for that resource first
	// in the transaction.
	CodeUnfenced = "FG002"

	// CodeMisuse (FG003): a fence or a protected table used in a way that
	// protects nothing: a NULL or negative token, a NULL or empty resource
	// (or an empty list of them), a row of a protected table whose resource
	// expression yields NULL (the message names the table), a proof that
	// is not well formed (the message says what is wrong with it), and
	// FenceSQL or FenceManySQL on a database that requires signed tokens
	// (the message says to use FenceSignedSQL with the token service's
	// proof). Not retryable: the calling code or the table's data is wrong.
	CodeMisuse = "FG003"

	// CodeFenceTimeout (FG004): the fence waited longer than the database's
	// fencegate.fence_timeout for the resource's mark, which another
	// transaction holds (a holder stalled inside its transaction). Nothing
	// was checked or advanced. Retryable: roll back and try again, ideally
	// after a short random delay; the stalled holder's transaction ends by
	// itself under idle_in_transaction_session_timeout.
	CodeFenceTimeout = "FG004"

	// CodeSchemaInvalid (FG005): the fencegate schema in this database is
	// missing a piece, at another version, or altered (a function
	// replaced, an overload added, an owner changed, a trigger dropped or
	// disabled). The fence refuses to run rather than guard nothing. Not
	// retryable: an administrator runs "fencegate schema status" to see the
	// problems and "fencegate schema upgrade" to repair them.
	CodeSchemaInvalid = "FG005"

	// CodeProtectedDDL (FG006): an operation a protected table never
	// allows, fence or not: TRUNCATE, and (where the DDL guard is
	// installed) DDL on a protected table or on a type of its columns by a
	// role outside the fencegate owner role. Not retryable: unprotect the
	// table first, as an administrator, if the change is intended.
	CodeProtectedDDL = "FG006"

	// CodePrivilegedRole (FG007): the gate refused a session at startup
	// because its role could switch enforcement off (a superuser, the owner
	// of a protected table or of schema fencegate, or a member of such a
	// role). Not retryable: connect as an application role that holds only
	// the grants "fencegate schema install --grant ROLE" gives.
	CodePrivilegedRole = "FG007"

	// CodeBadProof (FG008): the database requires signed tokens and the
	// proof offered with the token does not verify: it names a key id the
	// database does not hold, or its MAC does not match (cluster, resource,
	// token), so the token was forged, minted for another resource, or
	// minted by another token service cluster. Nothing was checked or
	// advanced. Not retryable with the same proof: take the lock again
	// (the token service returns a token with its proof), or, after a key
	// rotation, give the database the new key ("fencegate schema
	// require-signed"). A proof that is not even well formed is CodeMisuse.
	CodeBadProof = "FG008"
)

// FenceSQL takes the fence on one resource: $1 is the resource (text, compared
// byte for byte), $2 the fencing token (bigint). It returns the accepted token
// and fails with CodeStaleToken when a higher one was accepted before. Run it
// first in the transaction, before its reads.
const FenceSQL = "SELECT fencegate.fence($1::text, $2::bigint)"

// FenceSignedSQL takes the fence on one resource like FenceSQL, with $3 the
// token's proof (text, KEYID.HEX as the token service returns it beside the
// token; see package tokensign). A database that requires signed tokens
// verifies the proof first and fails with CodeBadProof when it does not
// match, advancing nothing; it refuses FenceSQL and FenceManySQL with
// CodeMisuse. A database that does not require them checks only that the
// proof is well formed.
const FenceSignedSQL = "SELECT fencegate.fence($1::text, $2::bigint, $3::text)"

// FenceManySQL takes the fence on every resource of $1 (text[]) with one token
// $2 (bigint), in one statement: the marks are locked in one order (byte-wise
// sort, duplicates removed), so two bulk writers never deadlock on each other.
// It returns the token and fails with CodeStaleToken, naming the first stale
// resource, when any of them has a higher token. Its one token covers many
// resources, which no proof does: a database that requires signed tokens
// refuses it with CodeMisuse.
const FenceManySQL = "SELECT fencegate.fence_many($1::text[], $2::bigint)"

// EffectSQL records an effect in the calling transaction, which must hold a
// standing fence on the resource (FenceSQL first): $1 is the resource, $2
// the name of the relay's target, $3 the JSON payload (jsonb; text that is
// JSON converts). It returns the effect's id. Once the transaction commits,
// a relay ("fencegate relay") POSTs the payload to the target with an
// Idempotency-Key that stays the same across retries; a rollback leaves no
// trace. It fails with CodeUnfenced without a standing fence and with
// CodeMisuse for an empty or overlong resource, a target that is not a name
// or a payload that is NULL or larger than 1 MiB.
const EffectSQL = "SELECT fencegate.effect($1::text, $2::text, $3::jsonb)"
