package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"syscall"
	"time"

	"github.com/fencegate/fencegate/internal/tlsfiles"
	"github.com/fencegate/fencegate/raftstore"
	"github.com/fencegate/fencegate/tokenclient"
	"github.com/fencegate/fencegate/tokenservice"
	"github.com/fencegate/fencegate/tokensign"
)

// tokenServeOpts are the flags of 'fencegate token serve'.
type tokenServeOpts struct {
	id, dataDir, raftAddr, apiAddr, peers, join, logLevel, via string
	signingKeys                                                string
	waitForFounding, commitPerBatch, insecurePlaintext         bool
	reserveSize                                                int
	foundingTimeout, heartbeat, election, lease, roundTimeout  time.Duration
	snapThreshold, trailing                                    uint64
	tls                                                        *tlsFlags
}

// tokenServeFlags defines the flags of 'fencegate token serve'.
func tokenServeFlags(fs *flag.FlagSet) *tokenServeOpts {
	o := &tokenServeOpts{}
	fs.StringVar(&o.id, "id", "", "this node's ID, e.g. n1 (required; no default)")
	fs.StringVar(&o.dataDir, "data-dir", "", "directory for the Raft log, snapshots and cluster identity (required; no default)")
	fs.StringVar(&o.raftAddr, "raft-addr", "127.0.0.1:7201", "HOST:PORT for Raft traffic between nodes")
	fs.StringVar(&o.apiAddr, "api-addr", "127.0.0.1:7101", "HOST:PORT for the HTTP/JSON API")
	fs.StringVar(&o.peers, "peers", "", "voters of a new cluster as ID=RAFTADDR=APIADDR,...; the same on every node. An empty --data-dir founds the cluster only once every peer answers and none holds the cluster's state, and otherwise exits saying how to replace the node; ignored when --data-dir holds state; with TLS the API addresses are https (default empty)")
	fs.StringVar(&o.join, "join", "", "API URLs of members of an existing cluster, comma-separated: with an empty --data-dir, wait until the cluster lists this node as a non-voter or not at all, then join (see 'fencegate token members add'); ignored when --data-dir holds state (default empty)")
	fs.BoolVar(&o.waitForFounding, "wait-for-founding", false, "with an empty --data-dir, wait without limit instead of exiting: for every peer to answer, or, when the peers hold the cluster's state, until the cluster lists this node as a non-voter (default false)")
	fs.DurationVar(&o.foundingTimeout, "founding-timeout", 2*time.Minute, "with an empty --data-dir, how long to wait for the peers (to found, or to join) before exiting")
	fs.DurationVar(&o.heartbeat, "heartbeat-timeout", time.Second, "Raft heartbeat timeout")
	fs.DurationVar(&o.election, "election-timeout", time.Second, "Raft election timeout")
	fs.DurationVar(&o.lease, "leader-lease-timeout", 500*time.Millisecond, "how long a leader without a quorum keeps leading before stepping down; at most --heartbeat-timeout")
	fs.Uint64Var(&o.snapThreshold, "snapshot-threshold", 8192, "log entries between snapshots")
	fs.Uint64Var(&o.trailing, "trailing-logs", 10240, "log entries kept after a snapshot")
	fs.BoolVar(&o.commitPerBatch, "commit-per-batch", false, "commit one log entry per batch of token requests instead of handing tokens out of a reserved range after a confirmation round (default false: the read-index path)")
	fs.IntVar(&o.reserveSize, "reserve-size", 65536, "tokens one reservation entry sets aside for the leader to hand out (read-index path); tokens left in it when leadership moves are skipped")
	fs.DurationVar(&o.roundTimeout, "round-timeout", time.Second, "how long a confirmation round waits for a majority of the voters before it fails and its requests get a retryable no_quorum (read-index path)")
	fs.StringVar(&o.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	o.tls = addTLSFlags(fs)
	fs.BoolVar(&o.insecurePlaintext, "insecure-plaintext", false, "without TLS, still bind --api-addr and --raft-addr to addresses other hosts can reach: anyone there can mint tokens, read the cluster's state and speak Raft to this node; routes that change the cluster answer only to loopback and to the members' hosts (default false: without TLS, loopback addresses only)")
	fs.StringVar(&o.signingKeys, "signing-keys", "", "sign every token: a file of \"KEYID HEXKEY\" lines, at least 32 bytes of key each; the first signs, the others are kept for rotation; give every node the same file (default empty: tokens without proofs)")
	fs.StringVar(&o.via, "dial-via", "", "reach these peer addresses through others, as ADDR=VIA,... (fault injection: relays between nodes; default empty: dial peers directly)")
	hideFlag(fs, "dial-via") // the fault campaign's, not the users'
	return o
}

func runTokenServe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("fencegate token serve", flag.ContinueOnError)
	o := tokenServeFlags(fs)
	if err := parseFlagsOnly(fs, args, stderr, "serve"); err != nil {
		return err
	}
	if o.id == "" || o.dataDir == "" {
		return usagef("--id and --data-dir are required, e.g. --id n1 --data-dir /var/lib/fencegate/n1")
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(o.logLevel)); err != nil {
		return usagef("--log-level %q: use debug, info, warn or error", o.logLevel)
	}
	peerList, err := tokenservice.ParsePeers(o.peers)
	if err != nil {
		return usagef("--peers: %v", err)
	}
	join := splitList(o.join)
	for _, u := range join {
		if _, err := tokenclient.NormalizeURL(u); err != nil {
			return usagef("--join: %v", err)
		}
	}
	if o.foundingTimeout <= 0 {
		return usagef("--founding-timeout must be positive")
	}
	if o.reserveSize < 1 || o.reserveSize > 1<<30 {
		return usagef("--reserve-size %d: give 1..%d tokens", o.reserveSize, 1<<30)
	}
	if o.roundTimeout <= 0 {
		return usagef("--round-timeout must be positive, e.g. 1s")
	}
	dial, err := dialVia(o.via)
	if err != nil {
		return usagef("--dial-via: %v", err)
	}
	nodeTLS, creds, err := o.tls.node()
	if err != nil {
		return err
	}
	if nodeTLS == nil && !o.insecurePlaintext {
		for _, a := range []string{o.apiAddr, o.raftAddr} {
			if !tlsfiles.IsLoopback(a) {
				return fmt.Errorf("no TLS on %s, which other hosts can reach: give --tls-ca, --tls-cert and --tls-key, bind to 127.0.0.1, or accept plain HTTP there with --insecure-plaintext", a)
			}
		}
	}
	raiseFileLimit()
	var keys *tokensign.Keyring
	if o.signingKeys != "" {
		if keys, err = tokensign.LoadKeys(o.signingKeys); err != nil {
			return fmt.Errorf("--signing-keys %w", err)
		}
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level})).With("node", o.id)
	procs, restore := oneProc()
	defer restore()
	if procs != 1 {
		logger.Info("running Go code on several threads, as GOMAXPROCS says", "gomaxprocs", procs)
	}
	srv, err := tokenservice.Start(ctx, tokenservice.Config{
		Config: raftstore.Config{
			ID:                 o.id,
			DataDir:            o.dataDir,
			RaftAddr:           o.raftAddr,
			APIAddr:            o.apiAddr,
			Peers:              peerList,
			Join:               join,
			WaitForFounding:    o.waitForFounding,
			FoundingTimeout:    o.foundingTimeout,
			Logger:             logger,
			HeartbeatTimeout:   o.heartbeat,
			ElectionTimeout:    o.election,
			LeaderLeaseTimeout: o.lease,
			SnapshotThreshold:  o.snapThreshold,
			TrailingLogs:       o.trailing,
			Dial:               dial,
		},
		TLS: nodeTLS, Credentials: creds, SigningKeys: keys, InsecurePlaintext: o.insecurePlaintext,
		CommitPerBatch: o.commitPerBatch, ReserveSize: o.reserveSize, RoundTimeout: o.roundTimeout,
	})
	if err != nil {
		return serveHint(err, o)
	}
	fmt.Fprintf(stdout, "fencegate token: node %s serving api=%s raft=%s\n", o.id, srv.APIURL(), srv.RaftAddr())
	if keys != nil {
		logger.Info("signing tokens", "key_id", keys.SigningKeyID(), "keys", len(keys.Keys()))
	}
	<-ctx.Done()
	logger.Info("shutting down")
	return srv.Close()
}

// raiseFileLimit raises the soft limit on open file descriptors to the hard
// limit, so that the node's connection cap (tokenservice.Config.MaxConns,
// derived from it) is as high as the system allows. The Go runtime usually
// did so already; a failure leaves the limit as it was.
func raiseFileLimit() {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err == nil && rl.Cur < rl.Max {
		rl.Cur = rl.Max
		_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &rl)
	}
}
