// Package raftstore is the replicated state machine behind fencegate's
// fencing tokens: a hashicorp/raft group whose log and stable store are
// raft-boltdb (every append fsynced), with a file snapshot store and a
// transport over a Layer the caller chooses: plain TCP for loopback, or
// mutual TLS (NewTLSLayer) across hosts.
//
// The state machine holds one global counter and the API address of each
// member, so its size is constant however many resources ask for tokens.
// Tokens are minted only in FSM.Apply, when a committed log entry is applied;
// a leader never hands out a token from its own memory. Each allocation entry
// reserves a range of the counter, and a Batcher merges concurrent requests
// into one entry (group commit), so throughput is not one fsync per token.
//
// A Store is one node. Open bootstraps a new cluster from Config.Bootstrap
// when the data directory is empty, or resumes from the directory's state.
// Join and Remove change the voters idempotently. See DESIGN.md for the
// reasoning behind these choices.
package raftstore
