// Package lockclient takes Redis locks, on one Redis (single-node mode) or on
// N independent masters (Redlock), and hands out a fencing token with each
// lock, so that the resource the lock protects can reject a holder that lost
// its lock without noticing.
//
// # Two modes
//
// Efficiency mode: a Client built without a TokenSource. A lock is a Redis
// key set with SET NX PX and deleted with a compare-and-delete script. It
// keeps two workers from doing the same work most of the time; when a holder
// stalls past its TTL, two may still run at once. Use it where duplicate
// work only costs time.
//
// Correctness mode: a Client with a TokenSource (the fencegate token
// service). Every lock carries a token larger than every earlier one, and
// Lock.InTx writes in a transaction fenced with it, on a database where
// the fencegate schema is installed and the written tables are protected
// (package pgfence): PostgreSQL rejects the transaction of a holder whose
// token is older than one it already accepted (ErrStaleToken), and any
// write to a protected row whose resource this transaction has not fenced
// (ErrUnfenced), on every connection, through the fencegate proxy or
// straight to PostgreSQL. Use it where two writers must never both win.
//
// The TokenSource carries its own credentials: across hosts, build the
// token service's client with the cluster CA and an identity of role
// client, and pass it in; lockclient adds nothing and needs no option of
// its own:
//
//	tlsCfg, err := tokenclient.LoadClientTLS("ca.pem", "client-app.pem", "client-app-key.pem")
//	// or a bearer credential: tokenclient.WithCredential(cred) with
//	// cred from tokenclient.LoadClientCredential("app.credential")
//	tokens, err := tokenclient.NewClient(urls, tokenclient.WithTLS(tlsCfg))
//	locks, err := lockclient.Dial(redisAddrs, tokens)
//
// # Grant, then token, then confirm
//
// Acquire and TryAcquire return a Lock only after three steps:
//
//  1. the lock is granted (SET NX PX with a random value on a majority);
//  2. a token is minted by the TokenSource;
//  3. the lock is confirmed still held and extended: a compare-and-pexpire
//     that succeeds only where the key still holds this grant's value, on a
//     majority.
//
// Why this order. The token must be minted while the lock is held, and the
// holder must know that it was. If the token were taken before the lock, a
// slow client could take the lock with a token older than its predecessor's
// and have every write rejected. If the token were handed out without step
// 3, a holder could be granted the lock, stall until it expired, and then
// get a token: any client that took the lock in between minted its token
// earlier, so the stalled holder's token would be the larger one and the
// database would accept its writes and reject those of the rightful holder.
// Step 3 rules that out: the key still holds this grant's random value only
// if it never expired since the grant (no one else can set that value), so
// on a majority nobody else was granted the lock between step 1 and step 3,
// and the token minted in step 2 is larger than that of every earlier
// holder. A holder whose lock expired before it got its token fails step 3
// and never uses the token; any holder that takes the lock later mints its
// token after this one's and so gets a larger one.
//
// # The lease
//
// A Lock's ValidUntil is start of the last grant or extension + TTL −
// drift (drift = TTL × drift factor + 2ms). It is measured on
// CLOCK_BOOTTIME, which keeps counting while the machine is suspended, as
// Redis's expiry of the key does; Go's timers and time.Now's monotonic
// reading run on CLOCK_MONOTONIC, which stops then, and would keep a lease
// alive for as long as a laptop or VM slept. Its Done channel (and Context)
// closes as soon as the lease is known lost: when the validity passes (a
// timerfd on CLOCK_BOOTTIME wakes the process at that moment, or right
// after a resume or a pause that outlasted it, and every read of Done,
// Context or ValidUntil compares with the clock first), when a refresh
// finds the lock gone on a majority, when an extension comes back after the
// validity passed, or on Release. WithAutoRefresh runs a watchdog that
// extends the lock at a fraction of its TTL and closes Done at once when
// that fails.
//
// Knowing the lease is lost does not stop a write already on its way: a
// pause can fall between any check and the write. Only the fence, checked by
// the database inside the writing transaction, does that.
//
// # Fenced transactions
//
// Lock.InTx runs BEGIN, the fence, the caller's function and COMMIT. The
// fence guards exactly the lock's resource in exactly that transaction: the
// caller's function may write the protected rows of that resource, no
// others. The connection belongs to an application role (the fencegate
// proxy refuses superusers and table owners, ErrPrivilegedRole). COMMIT
// goes out under a context of its own (WithCommitTimeout), not the lease's:
// once the fence holds the resource's row lock no other holder can write, so
// finishing the commit is safe, and cancelling it midway would only leave
// its outcome unknown. When the connection fails during COMMIT the outcome
// is reported as unknown (ErrCommitUnknown), never as a failure: make such
// writes idempotent (a key of the operation's own, the token stored in the
// row) and look before trying again; ExampleLock_InTx_idempotent shows how.
// Serialization failures, deadlocks and fence timeouts (FG004: a holder
// stalled inside its transaction keeps the resource's mark locked) are
// retried within the lease (WithTxRetries), then reported as
// ErrSerialization or ErrFenceTimeout. Every fencegate SQLSTATE (package
// fencegate, FG001..FG007) maps to an error of this package usable with
// errors.Is, the *pgconn.PgError staying reachable with errors.As.
//
// # Connecting
//
// Dial takes host:port or Redis URLs: redis://user:password@host:port/db,
// rediss:// for TLS (WithRedisTLS for a private certificate authority or
// client certificates), unix:///path. No error or log line carries a
// password. A node's failure is reported in its own words, as a
// *NodeError with a NodeErrorKind: unreachable, authentication failed, not
// permitted, bad answer; a lock held elsewhere is "refused". Acquire waits
// for a lock held elsewhere until its context ends, for unreachable nodes
// at most WithMaxUnreachable, for a token at most WithTokenTimeout, and not
// at all for nodes that reject its credentials or requests.
//
// # Redlock
//
// With N masters every request goes to all of them at once and the replies
// are counted as they arrive: a lock needs N/2+1 grants within the
// validity; a failed attempt is undone on every node; retries wait a random
// time. Requests from concurrent callers to one master are pipelined
// together. See DESIGN.md for what Redlock does and does not promise.
package lockclient
