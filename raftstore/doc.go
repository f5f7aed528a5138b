// Package raftstore is the replicated state machine behind fencegate's
// fencing tokens: a hashicorp/raft group whose log and stable store are
// raft-boltdb (every append fsynced), with a file snapshot store and a
// transport over a Layer the caller chooses: plain TCP for loopback, or
// mutual TLS (NewTLSLayer) across hosts.
//
// The state machine holds one global counter and the API address of each
// member, so its size is constant however many resources ask for tokens.
// Tokens are minted only in FSM.Apply, when a committed log entry is applied:
// each allocation or reservation entry takes a range of the counter. A
// Batcher merges concurrent requests into one call (group commit). Its
// AllocFunc is either Store.Allocate, one entry per batch, or
// ReadIndex.Alloc, which hands tokens out of a range the leader reserved
// with one committed entry in its current term, each batch only after a
// confirmation round: a majority of the voters answered, after the round
// began, that they still follow this leader in its term (see DESIGN.md,
// "Tokens from a reserved range", for why such a token is larger than every
// token returned before its request arrived).
//
// A Store is one node. Prepare opens its data directory and takes its
// Raft Layer (Config.Layer, or plain TCP on Config.RaftAddr); Pending.Start
// decides how the node starts and starts Raft on that layer. A directory
// that holds state resumes once peers that make a majority with it have
// answered, and is refused (ErrRolledBack) when one saw it hold a higher
// term or more committed entries than it does: it was put back from an
// older copy; every running node records what its peers hold, each
// Config.HeldInterval. An empty one founds a new cluster with
// Config.Peers only once every other voter has answered (through
// Config.Probe) and none holds the state of a cluster founded without this
// directory; otherwise it is refused with ErrMustReplace, because an empty
// node that starts Raft grants votes and acknowledgements in the name of
// the member whose data it lost. A lost member comes back through
// membership: Remove, then an empty node started with Config.Join,
// AddNonvoter, and Promote once it has caught up (its votes are withheld
// until then). The cluster's id is random, committed in the log by its
// first leader, and recorded in every data directory. See DESIGN.md for
// the reasoning behind these choices.
//
// Errors say what is wrong in this package's terms (Config.RaftAddr, the
// peers list, the data directory) and never name a program's flags; an
// error about a setting is a *FieldError naming the Config fields, which a
// program maps to the flag or file setting that fixes it.
package raftstore
