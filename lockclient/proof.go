package lockclient

import (
	"context"
	"errors"

	"github.com/fencegate/fencegate"
	"github.com/jackc/pgx/v5"
)

// Signed tokens. A token service started with signing keys returns a proof
// beside each token: the token is bound to its cluster and resource, and a
// database that requires signed tokens (fencegate schema require-signed)
// accepts a fence only with a proof that verifies. A TokenSource that also
// implements SignedTokenSource (tokenclient.Client does) gives the lock
// its proof; Fence and InTx then run FenceSignedSQL instead of FenceSQL. A
// token without a proof is fenced with FenceSQL as before, which a
// database that requires signed tokens refuses (ErrFenceMisuse).

// SignedTokenSource is a TokenSource that returns each token's proof too:
// "" when the token service does not sign.
type SignedTokenSource interface {
	TokenSource
	NextSigned(ctx context.Context, resource string) (token int64, proof string, err error)
}

// FenceSignedSQL is FenceSQL with the token's proof as $3:
// fencegate.FenceSignedSQL.
const FenceSignedSQL = fencegate.FenceSignedSQL

// ErrBadProof: the database refused the lock's token because its proof
// does not verify: the token service's keys are not the database's (after
// a key rotation, give the database the new key file), or the token
// service belongs to another cluster than the one the database expects.
// Nothing was advanced. Not retryable as is.
var ErrBadProof = errors.New("lockclient: the database refused the token's proof")

// Proof returns the lock's token proof, "" when the token service does not
// sign or in efficiency mode.
func (l *Lock) Proof() string { return l.proof }

// nextToken asks the TokenSource for a token and, when it can say, its proof.
func (c *Client) nextToken(ctx context.Context, resource string) (int64, string, error) {
	if s, ok := c.tokens.(SignedTokenSource); ok {
		return s.NextSigned(ctx, resource)
	}
	tok, err := c.tokens.NextToken(ctx, resource)
	return tok, "", err
}

// fenceExec runs the fence statement that fits the lock's token.
func (l *Lock) fenceExec(ctx context.Context, tx pgx.Tx) error {
	var err error
	if l.proof != "" {
		// The proof is a bearer credential while its token is current: it
		// goes as a bound parameter (QueryExecModeExec: the extended
		// protocol, one round trip, an unnamed statement, so behind
		// PgBouncer too), never in statement text where pg_stat_activity
		// and the server's log show it, whatever the connection's default
		// mode (simple_protocol writes parameters into the text).
		_, err = tx.Exec(ctx, FenceSignedSQL, pgx.QueryExecModeExec, l.resource, l.token, l.proof)
	} else {
		_, err = tx.Exec(ctx, FenceSQL, l.resource, l.token)
	}
	return err // fenceError adds ErrBadProof for FG008, as the other sentinels
}
