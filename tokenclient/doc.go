// Package tokenclient is the Go client of the fencegate token service
// (package tokenservice, which serves fencing tokens from a Raft group).
// It imports neither Raft nor bbolt, so a program that only takes locks
// (lockclient with this client as its token source) carries no server code:
// see "Binary size" below.
//
// Client takes the addresses of all nodes, sends each call to the node that
// last answered, follows the leader a node names, fails over to the others,
// and retries retryable errors with exponential backoff and full jitter until
// its context ends. Concurrent calls on one Client are coalesced: calls
// that arrive while a token request to a node is in flight go out together
// as one batch request when it returns (WithCoalescing(false) turns this
// off). A call only joins a request not yet sent, so the service's
// guarantee (a token is greater than every token returned before the call
// began) holds per call. WithTLS (LoadClientTLS) and WithCredential
// (LoadClientCredential) give it the cluster CA and an identity. Errors
// name what each node answered and satisfy errors.Is with the sentinels of
// package tokenapi (ErrNoQuorum, ErrRefused...) and of this package, and
// with context.Canceled or context.DeadlineExceeded when the context ended.
// The answers (Status, Members, Snapshot...) are tokenapi's types, the JSON
// forms the server writes.
//
// The service's HTTP/JSON API, its guarantee and its security are described
// in package tokenservice.
//
// # Binary size
//
// A program that takes locks (lockclient.Dial with a token client, go build
// with no flags, Go 1.26, linux/amd64) was 16,946,810 bytes when the client
// lived in tokenservice, whose imports brought hashicorp/raft, raft-boltdb,
// bbolt and raftstore along; with tokenclient it is 12,367,673 bytes
// (27% smaller), and none of those packages is linked in.
// TestNoServerDependencies keeps it so.
package tokenclient
