package tokenclient

// Token is a fencing token and where it came from.
type Token struct {
	// Resource is the resource the token was asked for (tokens come from one
	// global counter, so they also order grants across resources).
	Resource string
	// Value is the token: > 0, and greater than every token returned before
	// the request was sent.
	Value int64
	// Term and Index are the Raft term and log index of the entry that minted it.
	Term, Index uint64
	// Leader is the ID of the node that committed that entry.
	Leader string
	// Proof is the token's proof (KEYID.HEX, package tokensign) when the
	// service signs tokens, else "".
	Proof string
}
