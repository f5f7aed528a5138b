package tokenservice

import (
	"context"
	"fmt"
	"github.com/fencegate/fencegate/tokensign"
	"log/slog"
	"net"
	"strings"
	"time"

	"github.com/fencegate/fencegate/raftstore"
)

// Peer is one voter of a new cluster: "ID=RAFTADDR=APIADDR" on the command line.
type Peer struct {
	ID       string
	RaftAddr string
	APIAddr  string
}

// ParsePeers parses "n1=127.0.0.1:7201=http://127.0.0.1:7101,n2=...". The
// API address may omit "http://". An empty string gives no peers.
func ParsePeers(s string) ([]Peer, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, nil
	}
	var peers []Peer
	seen := map[string]bool{}
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		parts := strings.SplitN(item, "=", 3)
		if len(parts) != 3 || parts[0] == "" || parts[1] == "" || parts[2] == "" {
			return nil, fmt.Errorf("%w: %q is not ID=RAFTADDR=APIADDR (e.g. n1=127.0.0.1:7201=http://127.0.0.1:7101)", ErrBadPeers, item)
		}
		if _, _, err := net.SplitHostPort(parts[1]); err != nil {
			return nil, fmt.Errorf("%w: raft address %q of %s is not HOST:PORT", ErrBadPeers, parts[1], parts[0])
		}
		api, err := NormalizeURL(parts[2])
		if err != nil {
			return nil, fmt.Errorf("%w: api address of %s: %v", ErrBadPeers, parts[0], err)
		}
		if seen[parts[0]] {
			return nil, fmt.Errorf("%w: node %s is listed twice; list each node once", ErrBadPeers, parts[0])
		}
		seen[parts[0]] = true
		peers = append(peers, Peer{ID: parts[0], RaftAddr: parts[1], APIAddr: api})
	}
	return peers, nil
}

// Config configures a token service node. Zero values take the defaults
// stated on each field.
type Config struct {
	// ID is the node's ID in the Raft group (e.g. "n1"). Required.
	ID string
	// DataDir holds the node's Raft log, snapshots and cluster identity. Required.
	DataDir string
	// RaftAddr is the HOST:PORT Raft listens on and advertises. Required.
	// Port 0 takes a free port (Server.RaftAddr reports it): for a node
	// that joins and is never restarted, as in tests; a founder's address
	// must be known to its peers beforehand.
	RaftAddr string
	// APIAddr is the HOST:PORT the API listens on (http://HOST:PORT, or
	// https://HOST:PORT with TLS, are accepted too). Required. Port 0 takes
	// a free port (Server.APIURL reports it).
	APIAddr string
	// Peers are the voters of a new cluster, the same on every node. A node
	// whose DataDir holds no state founds the cluster with them only once
	// every one of them answers and none holds the state of a cluster
	// founded without this directory; otherwise Start fails with
	// raftstore.ErrMustReplace (see raftstore's DESIGN.md, "Founding").
	// Ignored when DataDir holds state.
	Peers []Peer
	// Join lists API URLs of members of an existing cluster. A node whose
	// DataDir holds no state and that is given Join waits until a leader
	// confirms that the cluster lists it as a non-voter or not at all, and
	// then starts Raft; it is promoted to voter once it has caught up. A
	// replacement for a lost member is started this way, after the lost
	// member was removed (see README, "Replacing a node"). Ignored when
	// DataDir holds state.
	Join []string
	// FoundingTimeout bounds how long a node with an empty DataDir waits
	// for its peers (to found, or to join) before Start fails. The default
	// is 2m.
	FoundingTimeout time.Duration
	// WaitForFounding makes a node with an empty DataDir wait as long as
	// ctx allows instead of failing, also when its peers hold state (it
	// then joins once the cluster lists it as a non-voter). The default is
	// false.
	WaitForFounding bool
	// Logger receives the node's logs. The default is
	// slog.Default().With("component", "tokenservice").
	Logger *slog.Logger
	// TLS turns on TLS for the API, mutual TLS for Raft and for calls to
	// other nodes, and authentication with roles (see Routes); load it with
	// LoadNodeTLS. The default, nil, is plain HTTP and TCP with every route
	// open: for loopback only (a node bound elsewhere warns at start).
	TLS *NodeTLS
	// Credentials are the bearer credentials the API accepts besides client
	// certificates (LoadCredentials); they need TLS. The default is none.
	Credentials *Credentials
	// SigningKeys signs every token handed out (see proof.go and package
	// tokensign): the API returns a proof beside each token. Load them with
	// tokensign.LoadKeys; give every node the same file. The default, nil,
	// hands out tokens without proofs.
	SigningKeys *tokensign.Keyring
	// Dial opens connections to other nodes, both Raft and API forwarding.
	// Tests route it through fault-injecting relays. The default is a plain
	// TCP dial.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)

	// HeartbeatTimeout, ElectionTimeout and LeaderLeaseTimeout tune Raft.
	// The defaults are 1s, 1s and 500ms.
	HeartbeatTimeout, ElectionTimeout, LeaderLeaseTimeout time.Duration
	// TransportTimeout is the I/O deadline on Raft connections. The default is 10s.
	TransportTimeout time.Duration
	// SnapshotThreshold (default 8192), SnapshotInterval (default 30s) and
	// TrailingLogs (default 10240) control snapshots and log compaction.
	SnapshotThreshold uint64
	SnapshotInterval  time.Duration
	TrailingLogs      uint64
	// MaxBatch caps the tokens one log entry allocates. The default is 4096.
	MaxBatch int
	// MaxInflight caps the allocations (log entries, or forwarded calls on a
	// follower) in flight at once; requests arriving meanwhile form the next
	// batch. The default is 1.
	MaxInflight int
	// CommitPerBatch turns off the read-index path: the leader then commits
	// one log entry per batch of requests (group commit), as before. By
	// default (false) the leader reserves ReserveSize tokens with one
	// committed entry and hands them out from memory, each batch only after
	// a confirmation round in which a majority of the voters answered that
	// they still follow it in its term (see raftstore's DESIGN.md).
	CommitPerBatch bool
	// ReserveSize is how many tokens one reservation entry sets aside on
	// the read-index path. The default is 65536.
	ReserveSize int
	// RoundTimeout bounds one confirmation round on the read-index path;
	// a round that has not heard from a majority by then fails, and the
	// requests waiting on it get a retryable no_quorum. The default is 1s.
	RoundTimeout time.Duration
	// ForwardTimeout bounds one forwarded request to the leader. The default is 5s.
	ForwardTimeout time.Duration
	// PromoteInterval is how often the leader checks whether a non-voter
	// has caught up. The default is 500ms.
	PromoteInterval time.Duration
}

func (c *Config) storeConfig(apiURL string, probe raftstore.Prober) raftstore.Config {
	var boot []raftstore.Server
	for _, p := range c.Peers {
		boot = append(boot, raftstore.Server{ID: p.ID, RaftAddr: p.RaftAddr, APIAddr: p.APIAddr})
	}
	return raftstore.Config{
		ID:                 c.ID,
		DataDir:            c.DataDir,
		RaftAddr:           c.RaftAddr,
		APIAddr:            apiURL,
		Bootstrap:          boot,
		Join:               c.Join,
		Probe:              probe,
		FoundingTimeout:    c.FoundingTimeout,
		WaitForFounding:    c.WaitForFounding,
		Dial:               c.Dial,
		Logger:             c.Logger,
		HeartbeatTimeout:   c.HeartbeatTimeout,
		ElectionTimeout:    c.ElectionTimeout,
		LeaderLeaseTimeout: c.LeaderLeaseTimeout,
		TransportTimeout:   c.TransportTimeout,
		SnapshotThreshold:  c.SnapshotThreshold,
		SnapshotInterval:   c.SnapshotInterval,
		TrailingLogs:       c.TrailingLogs,
	}
}
