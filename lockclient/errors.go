package lockclient

import (
	"errors"
	"fmt"
	"strings"
)

var (
	// ErrNotAcquired means the lock was not granted: another client holds it
	// on enough nodes, too many nodes failed, or the grant took longer than
	// the lock's validity. The error returned is a *NotAcquiredError, which
	// says which nodes said no and why.
	ErrNotAcquired = errors.New("lockclient: lock not acquired")

	// ErrLockLost means the lease ended before the holder released it: the
	// validity passed, or the nodes report that the key is gone or belongs
	// to someone else. Work done under the lock may overlap another holder's;
	// only a fenced write (InTx) is safe from that.
	ErrLockLost = errors.New("lockclient: lock lost")

	// ErrReleased is the cause of a Lock's Context after Release.
	ErrReleased = errors.New("lockclient: lock released")

	// ErrNoToken means a fenced transaction was asked of a lock that carries
	// no fencing token (the client has no TokenSource: efficiency mode).
	ErrNoToken = errors.New("lockclient: lock has no fencing token (efficiency mode); build the client with a TokenSource")

	// ErrStaleToken means PostgreSQL refused the fence because a higher
	// token was already accepted for the resource (SQLSTATE FG001,
	// fencegate.CodeStaleToken): another holder took the lock and wrote
	// after this one lost it. Nothing of the transaction was committed. Do
	// not retry with the same lock; take the lock again (a new token) and
	// redo the work from fresh reads. The *pgconn.PgError stays reachable
	// with errors.As.
	ErrStaleToken = errors.New("lockclient: stale fencing token")

	// ErrUnfenced means PostgreSQL refused a write to a row of a protected
	// table in a transaction that holds no standing fence on that row's
	// resource (SQLSTATE FG002, fencegate.CodeUnfenced): a write outside
	// InTx, or inside the InTx of a lock on another resource. A bug in the
	// caller: take the lock of the row's resource and write in its InTx.
	ErrUnfenced = errors.New("lockclient: unfenced write")

	// ErrFenceMisuse means PostgreSQL refused a fence or a write that would
	// protect nothing (SQLSTATE FG003, fencegate.CodeMisuse): an empty
	// resource, a negative token, or a row of a protected table whose
	// resource expression yields NULL. Not retryable.
	ErrFenceMisuse = errors.New("lockclient: fence misuse")

	// ErrFenceTimeout means the fence waited longer than the database's
	// fencegate.fence_timeout for the resource's mark, which another
	// transaction holds (a holder stalled inside its transaction; SQLSTATE
	// FG004, fencegate.CodeFenceTimeout). Nothing was checked or advanced.
	// InTx runs the transaction again, as for a serialization failure,
	// while its retries and the lease last; the error it then returns
	// matches ErrFenceTimeout.
	ErrFenceTimeout = errors.New("lockclient: fence timed out waiting for another transaction on the resource")

	// ErrSchemaInvalid means the fencegate schema of the database is
	// missing, at another version or altered, and the fence (or the gate
	// at connection) refused to run (SQLSTATE FG005,
	// fencegate.CodeSchemaInvalid). An administrator repairs it ("fencegate
	// schema status", "fencegate schema upgrade").
	ErrSchemaInvalid = errors.New("lockclient: fencegate schema missing or altered")

	// ErrProtectedDDL means PostgreSQL refused an operation a protected
	// table never allows, such as TRUNCATE (SQLSTATE FG006,
	// fencegate.CodeProtectedDDL).
	ErrProtectedDDL = errors.New("lockclient: operation refused on a protected table")

	// ErrPrivilegedRole means the fencegate proxy refused the session
	// because its role could switch enforcement off: a superuser or the
	// owner of a protected table (SQLSTATE FG007,
	// fencegate.CodePrivilegedRole). Connect as an application role.
	ErrPrivilegedRole = errors.New("lockclient: privileged role refused by the fencegate proxy")

	// ErrCommitUnknown means the connection failed, or the commit timeout
	// passed, while COMMIT was on its way: the transaction may have
	// committed or not, and nothing on this connection can tell. Do not
	// simply run the work again under a new lock: the fence would let the
	// retry through (it carries a newer token) and the work would be done
	// twice. Make the write idempotent instead (see the InTx documentation)
	// and look in the database for the first attempt's trace. A COMMIT that
	// answered is never reported as unknown.
	ErrCommitUnknown = errors.New("lockclient: commit outcome unknown (the transaction may have committed)")

	// ErrSerialization means the transaction failed with a serialization
	// failure (SQLSTATE 40001) or a deadlock (40P01) on every attempt InTx
	// was allowed (see WithTxRetries), or once more when the lease had no
	// time left for another attempt. Nothing of it was committed. The last
	// *pgconn.PgError stays reachable with errors.As.
	ErrSerialization = errors.New("lockclient: serialization failure")

	// ErrTokenUnavailable means the lock was granted but no fencing token
	// could be had: the TokenSource failed, or did not answer within the
	// token timeout (WithTokenTimeout; for Acquire, over all its attempts).
	// The lock was released again; the TokenSource's error stays in the
	// chain.
	ErrTokenUnavailable = errors.New("lockclient: no fencing token")
)

// NotAcquiredError reports a failed attempt to take a lock. It matches
// ErrNotAcquired with errors.Is; Unwrap yields the per-node errors (joined
// with errors.Join, each a *NodeError), so errors.Is(err, NodeAuthFailed)
// tells that a node refused the credentials and errors.Is(err,
// context.DeadlineExceeded) that a node timed out.
type NotAcquiredError struct {
	// Resource is the resource the lock protects.
	Resource string
	// Granted lists the nodes that granted the lock during the attempt (it
	// was released on them again); when the confirmation after the token
	// (or a Refresh) failed, the nodes that confirmed and extended it.
	Granted []string
	// Taken lists the nodes that refused: another client held the lock
	// there or, for a confirmation or a Refresh, the key was gone or held
	// another value (whether it ever held this grant there, the node's
	// answer does not say).
	Taken []string
	// Failed lists the nodes that returned an error or did not answer in
	// time; NodeErrs has the details.
	Failed []string
	// Expired is true when a majority granted (or confirmed) the lock but
	// too late: the time spent acquiring (and, with a token, minting it)
	// used up the validity. A context that ended first is not reported so.
	Expired bool
	// Nodes is the number of nodes; those in none of the lists above had
	// not answered when the attempt ended.
	Nodes int
	// Quorum is the number of grants needed.
	Quorum int
	// NodeErrs joins the errors of the failed nodes (each a *NodeError)
	// and, when the grant's validity passed before a token came, the
	// TokenSource's error.
	NodeErrs error

	step      uint8 // stepGrant, stepConfirm or stepRefresh: what failed
	tokenWait bool  // the validity passed while waiting for the token
}

// What a NotAcquiredError reports on.
const (
	stepGrant   uint8 = iota // SET NX PX on every node
	stepConfirm              // compare-and-pexpire after the token
	stepRefresh              // compare-and-pexpire of a held lock (Refresh)
)

// Error describes the attempt in one line.
func (e *NotAcquiredError) Error() string {
	if e.tokenWait {
		return fmt.Sprintf("lockclient: lock %q not acquired: granted, but the validity was used up waiting for a token: %v",
			e.Resource, e.NodeErrs)
	}
	var b strings.Builder
	why := "held by another client"
	switch e.step {
	case stepConfirm:
		// The node answers 0 when the key is absent or holds another
		// value; a node that had refused the grant answers so too.
		why = "the key is gone or holds another value"
		fmt.Fprintf(&b, "lockclient: lock %q not acquired: granted, but confirmed after the token on %d of %d nodes, %d needed",
			e.Resource, len(e.Granted), e.Nodes, e.Quorum)
	case stepRefresh:
		why = "the key is gone or holds another value"
		fmt.Fprintf(&b, "lockclient: lock %q not extended: %d of %d nodes extended it, %d needed",
			e.Resource, len(e.Granted), e.Nodes, e.Quorum)
	default:
		fmt.Fprintf(&b, "lockclient: lock %q not acquired: %d of %d nodes granted, %d needed",
			e.Resource, len(e.Granted), e.Nodes, e.Quorum)
	}
	if e.Expired {
		b.WriteString(", but only after the validity had passed")
	}
	if len(e.Taken) > 0 {
		fmt.Fprintf(&b, "; refused (%s) on %s", why, strings.Join(e.Taken, ", "))
	}
	if len(e.Failed) > 0 {
		fmt.Fprintf(&b, "; failed on %s", strings.Join(e.Failed, ", "))
	}
	if e.NodeErrs != nil {
		fmt.Fprintf(&b, ": %s", strings.ReplaceAll(e.NodeErrs.Error(), "\n", "; "))
	}
	return b.String()
}

// Is reports whether target is ErrNotAcquired, for an attempt to take the
// lock. A Refresh that failed acquires nothing: its error matches
// ErrLockLost when the lock is lost, and only its node errors otherwise
// (the lock stays held until its validity passes).
func (e *NotAcquiredError) Is(target error) bool {
	return target == ErrNotAcquired && e.step != stepRefresh
}

// Unwrap returns the joined per-node errors.
func (e *NotAcquiredError) Unwrap() error { return e.NodeErrs }

// NodeErrorKind says what went wrong with one Redis node. It is an error
// itself, so errors.Is(err, NodeAuthFailed) finds it in any error of the
// package.
type NodeErrorKind uint8

const (
	// NodeUnreachable: no connection could be made, the connection broke,
	// or no answer came within the node timeout. Later attempts may
	// succeed.
	NodeUnreachable NodeErrorKind = iota + 1
	// NodeAuthFailed: the node rejected the credentials (NOAUTH, WRONGPASS:
	// check the user and password of the Redis URL), or the TLS handshake
	// failed to authenticate the server or the client (certificates).
	NodeAuthFailed
	// NodeNotPermitted: the node's ACL does not let the user run the lock's
	// commands (SET, EVALSHA, EVAL) on its keys (NOPERM).
	NodeNotPermitted
	// NodeBadAnswer: the node answered, but not as the lock protocol
	// expects: an error reply (READONLY from a replica, LOADING, an unknown
	// command), a reply of another type, or a non-TLS answer to a TLS
	// client.
	NodeBadAnswer
)

// String returns the words used in error messages: "unreachable",
// "authentication failed", "not permitted", "bad answer".
func (k NodeErrorKind) String() string {
	switch k {
	case NodeUnreachable:
		return "unreachable"
	case NodeAuthFailed:
		return "authentication failed"
	case NodeNotPermitted:
		return "not permitted"
	case NodeBadAnswer:
		return "bad answer"
	}
	return "error"
}

// Error makes a NodeErrorKind usable as an errors.Is target.
func (k NodeErrorKind) Error() string { return "lockclient: Redis node " + k.String() }

// NodeError is the error of one Redis node.
type NodeError struct {
	Node string        // the node's address (never its credentials)
	Kind NodeErrorKind // what went wrong
	Err  error         // the client library's error
}

func newNodeError(node string, err error) *NodeError {
	return &NodeError{Node: node, Kind: classify(err), Err: err}
}

// Error names the node, the kind and the cause: "10.0.0.2:6379: unreachable:
// dial tcp 10.0.0.2:6379: connect: connection refused".
func (e *NodeError) Error() string {
	return e.Node + ": " + e.Kind.String() + ": " + e.Err.Error()
}

// Unwrap returns the kind and the node's error.
func (e *NodeError) Unwrap() []error { return []error{e.Kind, e.Err} }
