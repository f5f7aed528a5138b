package tokenservice

import (
	"fmt"
	"log/slog"
	"net"
	"strings"
	"time"

	"github.com/fencegate/fencegate/raftstore"
	"github.com/fencegate/fencegate/tokenapi"
	"github.com/fencegate/fencegate/tokenclient"
	"github.com/fencegate/fencegate/tokensign"
)

// ParsePeers parses "n1=127.0.0.1:7201=http://127.0.0.1:7101,n2=...". The
// API address may omit "http://". An empty string gives no peers.
func ParsePeers(s string) ([]tokenapi.Peer, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, nil
	}
	var peers []tokenapi.Peer
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
		api, err := tokenclient.NormalizeURL(parts[2])
		if err != nil {
			return nil, fmt.Errorf("%w: api address of %s: %v", ErrBadPeers, parts[0], err)
		}
		if seen[parts[0]] {
			return nil, fmt.Errorf("%w: node %s is listed twice; list each node once", ErrBadPeers, parts[0])
		}
		seen[parts[0]] = true
		peers = append(peers, tokenapi.Peer{ID: parts[0], RaftAddr: parts[1], APIAddr: api})
	}
	return peers, nil
}

// Config configures a token service node. Zero values take the defaults
// stated on each field; DefaultConfig returns them filled in, and Validate
// checks a Config as Start does.
//
// The settings of the node's Raft store are raftstore's own Config,
// embedded, with its defaults (raftstore.DefaultConfig): ID, DataDir,
// RaftAddr, Peers, Join, FoundingTimeout, WaitForFounding, Dial, Logger,
// the Raft timings and the snapshot settings, each documented there. In a
// token service:
//
//   - ID, DataDir, RaftAddr and APIAddr are required. RaftAddr is the
//     HOST:PORT Raft listens on and advertises; APIAddr the HOST:PORT the
//     API listens on (http://HOST:PORT, or https://HOST:PORT with TLS, are
//     accepted too), and Start records the API's URL in the store. Port 0
//     takes a free port (Server.RaftAddr and Server.APIURL report it):
//     for a node that joins and is never restarted; a founder's addresses
//     must be known to its peers beforehand. RaftListener and APIListener
//     hand Start listeners the caller opened instead (tests bind
//     127.0.0.1:0 that way before they write the peers list, and bind the
//     same address again to restart a node).
//   - Peers are the voters of a new cluster (ParsePeers reads them); a node
//     whose DataDir holds no state founds the cluster with them only once
//     every one of them answers and none holds the state of a cluster
//     founded without this directory; otherwise Start fails with
//     raftstore.ErrMustReplace (see raftstore's DESIGN.md, "Founding").
//   - Join lists API URLs of members of an existing cluster: a node whose
//     DataDir holds no state waits until a leader confirms that the
//     cluster lists it as a non-voter or not at all, then starts Raft; it
//     is promoted to voter once it has caught up (docs/operations.md, "Replacing a
//     node").
//   - Dial opens connections to other nodes, both Raft and API
//     forwarding (tests route it through fault-injecting relays).
//   - Logger defaults to slog.Default().With("component", "tokenservice").
//   - Probe and Layer are Start's to set: leave them nil.
type Config struct {
	raftstore.Config

	// RaftListener, when set, is the listener Raft accepts on (plain TCP;
	// Start adds TLS when TLS is set), and RaftAddr is the listener's
	// address. The node owns it from Start on and closes it, also when
	// Start fails.
	RaftListener net.Listener
	// APIListener, when set, is the listener the API serves on (plain TCP;
	// Start adds TLS when TLS is set), and APIAddr is the listener's
	// address. The node owns it from Start on and closes it, also when
	// Start fails.
	APIListener net.Listener
	// TLS turns on TLS for the API, mutual TLS for Raft and for calls to
	// other nodes, and authentication with roles (see Routes); load it with
	// LoadNodeTLS. The default, nil, is plain HTTP and TCP without
	// authentication: for loopback only, unless InsecurePlaintext says
	// otherwise.
	TLS *NodeTLS
	// InsecurePlaintext lets a node without TLS bind its API or Raft
	// address to an address other hosts can reach; without it Start
	// refuses such a node (ErrBadConfig naming this field). Even then a
	// route that changes the cluster answers only to a loopback source or
	// to the host of a member's Raft address (PlaintextOpen tells which
	// routes answer to anyone), and Start logs the routes open to anyone.
	// Raft itself has no authentication without TLS. With TLS it has no
	// effect. The default is false.
	InsecurePlaintext bool
	// Credentials are the bearer credentials the API accepts besides client
	// certificates (LoadCredentials); they need TLS. The default is none.
	Credentials *Credentials
	// SigningKeys signs every token handed out (see proof.go and package
	// tokensign): the API returns a proof beside each token. Load them with
	// tokensign.LoadKeys; give every node the same file. The default, nil,
	// hands out tokens without proofs.
	SigningKeys *tokensign.Keyring

	// MaxBatch caps the tokens one log entry allocates. The default is
	// raftstore.DefaultMaxBatch (4096).
	MaxBatch int
	// MaxInflight caps the allocations (log entries, or forwarded calls on a
	// follower) in flight at once; requests arriving meanwhile form the next
	// batch. The default is raftstore.DefaultMaxInflight (1).
	MaxInflight int
	// CommitPerBatch turns off the read-index path: the leader then commits
	// one log entry per batch of requests (group commit), as before. By
	// default (false) the leader reserves ReserveSize tokens with one
	// committed entry and hands them out from memory, each batch only after
	// a confirmation round in which a majority of the voters answered that
	// they still follow it in its term (see raftstore's DESIGN.md).
	CommitPerBatch bool
	// ReserveSize is how many tokens one reservation entry sets aside on
	// the read-index path, at most raftstore.MaxReserveSize. The default is
	// raftstore.DefaultReserveSize (65536).
	ReserveSize int
	// RoundTimeout bounds one confirmation round on the read-index path;
	// a round that has not heard from a majority by then fails, and the
	// requests waiting on it get a retryable no_quorum. The default is
	// raftstore.DefaultRoundTimeout (1s).
	RoundTimeout time.Duration
	// ForwardTimeout bounds one forwarded request to the leader. The
	// default is DefaultForwardTimeout (5s).
	ForwardTimeout time.Duration
	// PromoteInterval is how often the leader checks whether a non-voter
	// has caught up. The default is DefaultPromoteInterval (500ms).
	PromoteInterval time.Duration

	// The limits below bound what a caller without an identity can hold
	// (see limits.go). A connection counts as authenticated once it
	// presented a client certificate of the cluster CA or a request on it
	// passed authentication; without TLS, once a request on it came from a
	// loopback source or a member's host.
	//
	// MaxConns caps the API connections open at once. When a new one
	// arrives at the cap, the oldest connection not yet authenticated is
	// closed to make room; when every open connection is authenticated,
	// the new one is closed. The same happens when the process runs out of
	// file descriptors. The default is DefaultMaxConns (4096), lowered to
	// three quarters of the file descriptor limit (RLIMIT_NOFILE) at Start
	// when that is smaller, so that Raft, forwarding and the data files keep
	// descriptors.
	MaxConns int
	// MaxConnsPerIP caps the API connections from one source IP, with the
	// same rule as MaxConns among that IP's connections. The default is
	// DefaultMaxConnsPerIP (1024), at most MaxConns.
	MaxConnsPerIP int
	// ReadHeaderTimeout bounds the TLS handshake and the reading of a
	// request's header on a new connection. The default is
	// DefaultReadHeaderTimeout (10s).
	ReadHeaderTimeout time.Duration
	// ReadTimeout bounds the reading of a whole request, header and body (a
	// body trickled in slower is cut off). The default is
	// DefaultReadTimeout (15s).
	ReadTimeout time.Duration
	// WriteTimeout bounds a request from the end of its header to the end
	// of its answer; no route streams or long-polls, and the slowest
	// (adding a member) finishes well within it. The default is
	// DefaultWriteTimeout (60s).
	WriteTimeout time.Duration
	// IdleTimeout closes a kept-alive connection on which no request
	// arrives for this long. The default is DefaultIdleTimeout (60s).
	IdleTimeout time.Duration
	// MaxHeaderBytes caps a request's header. The default is
	// DefaultMaxHeaderBytes (16 KiB). Bodies are capped at 64 KiB before
	// authentication, whatever the route.
	MaxHeaderBytes int
}

// Defaults of the token service's own settings; the store's are
// raftstore's (raftstore.DefaultConfig).
const (
	DefaultForwardTimeout  = 5 * time.Second
	DefaultPromoteInterval = 500 * time.Millisecond

	DefaultMaxConns          = 4096
	DefaultMaxConnsPerIP     = 1024
	DefaultReadHeaderTimeout = 10 * time.Second
	DefaultReadTimeout       = 15 * time.Second
	DefaultWriteTimeout      = 60 * time.Second
	DefaultIdleTimeout       = 60 * time.Second
	DefaultMaxHeaderBytes    = 16 << 10
)

// DefaultConfig returns a Config with every setting that has a default set
// to it; the node's identity (ID, DataDir, addresses, Peers or Join) and
// security (TLS, Credentials, SigningKeys) are the caller's to fill in.
func DefaultConfig() Config {
	return Config{
		Config:          raftstore.DefaultConfig(),
		MaxBatch:        raftstore.DefaultMaxBatch,
		MaxInflight:     raftstore.DefaultMaxInflight,
		ReserveSize:     raftstore.DefaultReserveSize,
		RoundTimeout:    raftstore.DefaultRoundTimeout,
		ForwardTimeout:  DefaultForwardTimeout,
		PromoteInterval: DefaultPromoteInterval,

		MaxConns:          DefaultMaxConns,
		MaxConnsPerIP:     DefaultMaxConnsPerIP,
		ReadHeaderTimeout: DefaultReadHeaderTimeout,
		ReadTimeout:       DefaultReadTimeout,
		WriteTimeout:      DefaultWriteTimeout,
		IdleTimeout:       DefaultIdleTimeout,
		MaxHeaderBytes:    DefaultMaxHeaderBytes,
	}
}

// Validate reports the first thing wrong with c, as Start would: a
// missing identity or address, a setting out of range, or what
// raftstore.Config.Validate finds. Errors about a setting are a
// *raftstore.FieldError naming its fields; they wrap ErrBadConfig or
// raftstore.ErrBadConfig.
func (c *Config) Validate() error {
	if c.ID == "" || c.DataDir == "" || (c.RaftAddr == "" && c.RaftListener == nil) || (c.APIAddr == "" && c.APIListener == nil) {
		return &raftstore.FieldError{Fields: []string{"ID", "DataDir", "RaftAddr", "APIAddr"},
			Err: fmt.Errorf("%w: the node id, data directory, raft address and API address (Config.ID, DataDir, RaftAddr, APIAddr) are all required", ErrBadConfig)}
	}
	if c.Probe != nil || c.Layer != nil {
		return &raftstore.FieldError{Fields: []string{"Probe", "Layer"},
			Err: fmt.Errorf("%w: Config.Probe and Config.Layer are set by Start; leave them nil", ErrBadConfig)}
	}
	if c.MaxBatch > maxAllocCount {
		return &raftstore.FieldError{Fields: []string{"MaxBatch"},
			Err: fmt.Errorf("%w: the batch limit %d is above %d, the most one forwarded allocation may carry", ErrBadConfig, c.MaxBatch, maxAllocCount)}
	}
	if c.ReserveSize < 0 || c.ReserveSize > raftstore.MaxReserveSize {
		return &raftstore.FieldError{Fields: []string{"ReserveSize"},
			Err: fmt.Errorf("%w: the reservation size %d is out of range; give 1..%d tokens (0 takes the default, %d)", ErrBadConfig, c.ReserveSize, raftstore.MaxReserveSize, raftstore.DefaultReserveSize)}
	}
	if c.RoundTimeout < 0 {
		return &raftstore.FieldError{Fields: []string{"RoundTimeout"},
			Err: fmt.Errorf("%w: the round timeout %v is negative; give a positive duration (0 takes the default, %v)", ErrBadConfig, c.RoundTimeout, raftstore.DefaultRoundTimeout)}
	}
	if c.MaxConns < 0 || c.MaxConnsPerIP < 0 || c.MaxHeaderBytes < 0 {
		return &raftstore.FieldError{Fields: []string{"MaxConns", "MaxConnsPerIP", "MaxHeaderBytes"},
			Err: fmt.Errorf("%w: the connection caps %d and %d and the header cap %d must not be negative (0 takes the default)", ErrBadConfig, c.MaxConns, c.MaxConnsPerIP, c.MaxHeaderBytes)}
	}
	if c.ReadHeaderTimeout < 0 || c.ReadTimeout < 0 || c.WriteTimeout < 0 || c.IdleTimeout < 0 {
		return &raftstore.FieldError{Fields: []string{"ReadHeaderTimeout", "ReadTimeout", "WriteTimeout", "IdleTimeout"},
			Err: fmt.Errorf("%w: the API timeouts must not be negative (0 takes the default)", ErrBadConfig)}
	}
	store := c.Config
	if c.RaftListener != nil {
		store.RaftAddr = c.RaftListener.Addr().String()
	}
	return store.Validate()
}

// setDefaults fills in the defaults of the token service's own settings;
// the store fills in its own.
func (c *Config) setDefaults() {
	if c.Logger == nil {
		c.Logger = slog.Default().With("component", "tokenservice")
	}
	if c.Dial == nil {
		var d net.Dialer
		c.Dial = d.DialContext
	}
	if c.ForwardTimeout <= 0 {
		c.ForwardTimeout = DefaultForwardTimeout
	}
	if c.MaxBatch <= 0 {
		c.MaxBatch = raftstore.DefaultMaxBatch
	}
	if c.MaxInflight <= 0 {
		c.MaxInflight = raftstore.DefaultMaxInflight
	}
	if c.PromoteInterval <= 0 {
		c.PromoteInterval = DefaultPromoteInterval
	}
	if c.MaxConns <= 0 {
		c.MaxConns = DefaultMaxConns
		if fds, ok := fileLimit(); ok && fds*3/4 < uint64(c.MaxConns) {
			c.MaxConns = max(int(fds*3/4), 1)
		}
	}
	if c.MaxConnsPerIP <= 0 {
		c.MaxConnsPerIP = DefaultMaxConnsPerIP
	}
	c.MaxConnsPerIP = min(c.MaxConnsPerIP, c.MaxConns)
	if c.ReadHeaderTimeout <= 0 {
		c.ReadHeaderTimeout = DefaultReadHeaderTimeout
	}
	if c.ReadTimeout <= 0 {
		c.ReadTimeout = DefaultReadTimeout
	}
	if c.WriteTimeout <= 0 {
		c.WriteTimeout = DefaultWriteTimeout
	}
	if c.IdleTimeout <= 0 {
		c.IdleTimeout = DefaultIdleTimeout
	}
	if c.MaxHeaderBytes <= 0 {
		c.MaxHeaderBytes = DefaultMaxHeaderBytes
	}
}
