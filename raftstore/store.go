package raftstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"go.etcd.io/bbolt"
)

var (
	// ErrNotLeader is returned by writes sent to a node that is not the leader.
	ErrNotLeader = errors.New("raftstore: not leader")
	// ErrNoLeader means the node knows no leader: it cannot reach a quorum,
	// or an election is under way. Retry later or on another node.
	ErrNoLeader = errors.New("raftstore: no leader known (no quorum)")
	// ErrLeadershipLost means the node lost leadership before the entry was
	// committed; the entry may or may not commit later. Retry.
	ErrLeadershipLost = errors.New("raftstore: leadership lost before commit")
	// ErrClosed is returned by a store that was closed or killed.
	ErrClosed = errors.New("raftstore: store closed")
	// ErrUnavailable means Raft did not accept the entry in time. Retry.
	ErrUnavailable = errors.New("raftstore: raft unavailable")
	// ErrBadConfig is returned by Open for an invalid Config.
	ErrBadConfig = errors.New("raftstore: bad configuration")
	// ErrForeignDataDir means the data directory belongs to another node or
	// another cluster.
	ErrForeignDataDir = errors.New("raftstore: data dir of another node or cluster")
	// ErrDataDirLocked means another process has the data directory open.
	ErrDataDirLocked = errors.New("raftstore: data dir in use")
	// ErrAddrInUse means a listen address is taken by another process.
	ErrAddrInUse = errors.New("raftstore: address in use")
	// ErrCorrupt is returned by FSM.Apply for an entry it cannot decode.
	ErrCorrupt = errors.New("raftstore: corrupt log entry")
	// ErrExhausted means the int64 token space is used up.
	ErrExhausted = errors.New("raftstore: token counter exhausted")
)

// Server is one voter of the cluster: its Raft ID and address, and the
// address of its token API (kept in the replicated state so every node can
// forward to the leader).
type Server struct {
	ID       string `json:"id"`
	RaftAddr string `json:"raft_addr"`
	APIAddr  string `json:"api_addr"`
}

// Config configures a Store. Zero durations and counts take the defaults
// stated on each field.
type Config struct {
	// ID is this node's Raft server ID. Required.
	ID string
	// DataDir holds the Raft log (raft.db), snapshots and cluster.json. Required.
	DataDir string
	// RaftAddr is the TCP address Raft listens on and advertises. Required.
	RaftAddr string
	// APIAddr is this node's token API base URL, recorded in the replicated
	// state when this node leads.
	APIAddr string
	// Bootstrap lists the voters of a new cluster. It is used only when the
	// data directory holds no Raft state; it must name this node.
	Bootstrap []Server
	// Layer is the network Raft runs on (NewTCPLayer, NewTLSLayer). The
	// Store owns it from Open on and closes it, also when Open fails. When
	// it is set, RaftAddr may be empty: it is then Layer.Addr(). The default
	// is plain TCP on RaftAddr, dialled with Dial.
	Layer Layer
	// Dial opens Raft connections to peers when Layer is nil. The default
	// is net.Dialer.DialContext.
	Dial DialFunc
	// Logger receives the store's and Raft's logs. The default is
	// slog.Default().With("component", "raftstore").
	Logger *slog.Logger

	// HeartbeatTimeout is Raft's follower heartbeat timeout. The default is 1s.
	HeartbeatTimeout time.Duration
	// ElectionTimeout is Raft's candidate election timeout. The default is 1s.
	ElectionTimeout time.Duration
	// LeaderLeaseTimeout is how long a leader goes without contact with a
	// quorum before it steps down. The default is 500ms; it is capped at
	// HeartbeatTimeout.
	LeaderLeaseTimeout time.Duration
	// CommitTimeout bounds how long followers wait to learn of new commits
	// when idle. The default is 20ms.
	CommitTimeout time.Duration
	// TransportTimeout is the I/O deadline on Raft connections. The default is 10s.
	TransportTimeout time.Duration
	// SnapshotThreshold is how many new log entries trigger a snapshot. The
	// default is 8192.
	SnapshotThreshold uint64
	// SnapshotInterval is how often Raft checks SnapshotThreshold. The
	// default is 30s.
	SnapshotInterval time.Duration
	// TrailingLogs is how many entries stay in the log after a snapshot. The
	// default is 10240.
	TrailingLogs uint64
	// RetainSnapshots is how many snapshots are kept on disk. The default is 2.
	RetainSnapshots int
}

func (c *Config) setDefaults() {
	if c.Dial == nil {
		var d net.Dialer
		c.Dial = d.DialContext
	}
	if c.Logger == nil {
		c.Logger = slog.Default().With("component", "raftstore")
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&c.HeartbeatTimeout, time.Second)
	def(&c.ElectionTimeout, time.Second)
	def(&c.LeaderLeaseTimeout, 500*time.Millisecond)
	def(&c.CommitTimeout, 20*time.Millisecond)
	def(&c.TransportTimeout, 10*time.Second)
	def(&c.SnapshotInterval, 30*time.Second)
	if c.LeaderLeaseTimeout > c.HeartbeatTimeout {
		c.LeaderLeaseTimeout = c.HeartbeatTimeout
	}
	if c.SnapshotThreshold == 0 {
		c.SnapshotThreshold = 8192
	}
	if c.TrailingLogs == 0 {
		c.TrailingLogs = 10240
	}
	if c.RetainSnapshots <= 0 {
		c.RetainSnapshots = 2
	}
}

func (c *Config) validate() error {
	switch {
	case c.ID == "":
		return fmt.Errorf("%w: node id is empty; set --id", ErrBadConfig)
	case c.DataDir == "":
		return fmt.Errorf("%w: data dir is empty; set --data-dir", ErrBadConfig)
	case c.RaftAddr == "":
		return fmt.Errorf("%w: raft address is empty; set --raft-addr", ErrBadConfig)
	}
	if len(c.Bootstrap) == 0 {
		return nil
	}
	ids, addrs := map[string]bool{}, map[string]bool{}
	self := false
	for _, p := range c.Bootstrap {
		if p.ID == "" || p.RaftAddr == "" {
			return fmt.Errorf("%w: peer %q has an empty id or raft address; write peers as ID=RAFTADDR=APIADDR", ErrBadConfig, p.ID)
		}
		if ids[p.ID] || addrs[p.RaftAddr] {
			return fmt.Errorf("%w: peer %s=%s appears twice; list each node once", ErrBadConfig, p.ID, p.RaftAddr)
		}
		ids[p.ID], addrs[p.RaftAddr] = true, true
		if p.ID == c.ID {
			self = true
			if p.RaftAddr != c.RaftAddr {
				return fmt.Errorf("%w: --peers gives node %s the raft address %s but --raft-addr is %s; make them equal",
					ErrBadConfig, c.ID, p.RaftAddr, c.RaftAddr)
			}
		}
	}
	if !self {
		return fmt.Errorf("%w: --peers does not name this node %q; add %s=%s=APIADDR to --peers or fix --id",
			ErrBadConfig, c.ID, c.ID, c.RaftAddr)
	}
	return nil
}

// Store is one node of the token Raft group.
type Store struct {
	cfg    Config
	log    *slog.Logger
	raft   *raft.Raft
	fsm    *fsm
	bolt   *raftboltdb.BoltStore
	trans  *raft.NetworkTransport
	layer  Layer // until the transport owns it
	ident  identity
	notify chan bool

	closeOnce sync.Once
	closeErr  error
	done      chan struct{}
	wg        sync.WaitGroup
}

// Open opens (or creates) the node's data directory, starts Raft and, when
// the directory holds no Raft state and cfg.Bootstrap is set, bootstraps a
// new cluster with those voters. A directory that holds state resumes from
// it; cfg.Bootstrap is then only checked against the stored cluster id.
func Open(cfg Config) (*Store, error) {
	if cfg.Layer != nil && cfg.RaftAddr == "" {
		cfg.RaftAddr = cfg.Layer.Addr().String()
	}
	if err := cfg.validate(); err != nil {
		if cfg.Layer != nil {
			cfg.Layer.Close()
		}
		return nil, err
	}
	cfg.setDefaults()
	id, err := readIdentity(cfg.DataDir)
	if err != nil {
		if cfg.Layer != nil {
			cfg.Layer.Close()
		}
		return nil, err
	}
	if err := checkIdentity(&cfg, id); err != nil {
		if cfg.Layer != nil {
			cfg.Layer.Close()
		}
		return nil, err
	}
	s := &Store{cfg: cfg, log: cfg.Logger, fsm: newFSM(), notify: make(chan bool, 16), done: make(chan struct{})}
	if id != nil {
		s.ident = *id
	}
	ok := false
	defer func() {
		if !ok {
			s.closeResources()
		}
	}()

	// Listen first: a taken port fails before anything is written.
	s.layer = cfg.Layer
	if s.layer == nil {
		ln, err := listen("raft", cfg.RaftAddr, "--raft-addr")
		if err != nil {
			return nil, err
		}
		s.layer = NewTCPLayer(ln, cfg.Dial)
	}
	if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
		return nil, fmt.Errorf("create data dir: %w", err)
	}
	s.bolt, err = raftboltdb.New(raftboltdb.Options{
		Path: filepath.Join(cfg.DataDir, "raft.db"),
		// The freelist is rebuilt on open instead of written on every
		// commit (as Consul runs raft-boltdb): less to write per fsync.
		BoltOptions: &bbolt.Options{Timeout: time.Second, NoFreelistSync: true, FreelistType: bbolt.FreelistMapType},
		NoSync:      false, // every log append is fsynced
	})
	if err != nil {
		if errors.Is(err, bbolt.ErrTimeout) {
			return nil, fmt.Errorf("%w: %s is open in another process; stop that process or use another --data-dir", ErrDataDirLocked, cfg.DataDir)
		}
		return nil, fmt.Errorf("open raft log: %w", err)
	}
	hcl := newHCLogger(s.log, "raft")
	snaps, err := raft.NewFileSnapshotStoreWithLogger(cfg.DataDir, cfg.RetainSnapshots, hcl)
	if err != nil {
		return nil, fmt.Errorf("open snapshot store: %w", err)
	}
	s.trans = raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream:  raftLayer{s.layer},
		MaxPool: 4,
		Timeout: cfg.TransportTimeout,
		Logger:  hcl,
	})

	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(cfg.ID)
	rc.HeartbeatTimeout = cfg.HeartbeatTimeout
	rc.ElectionTimeout = cfg.ElectionTimeout
	rc.LeaderLeaseTimeout = cfg.LeaderLeaseTimeout
	rc.CommitTimeout = cfg.CommitTimeout
	rc.SnapshotThreshold = cfg.SnapshotThreshold
	rc.SnapshotInterval = cfg.SnapshotInterval
	rc.TrailingLogs = cfg.TrailingLogs
	rc.BatchApplyCh = true
	rc.NotifyCh = s.notify
	rc.Logger = hcl
	if err := raft.ValidateConfig(rc); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadConfig, err)
	}

	logs, err := raft.NewLogCache(1024, s.bolt)
	if err != nil {
		return nil, fmt.Errorf("create log cache: %w", err)
	}
	existing, err := raft.HasExistingState(logs, s.bolt, snaps)
	if err != nil {
		return nil, fmt.Errorf("check raft state: %w", err)
	}
	// Bootstrap before Raft starts: once it runs, a vote request from a
	// peer that bootstrapped first would store a term and make this node's
	// state "existing" halfway through.
	bootstrapped := false
	if !existing && len(cfg.Bootstrap) > 0 {
		var conf raft.Configuration
		for _, p := range cfg.Bootstrap {
			conf.Servers = append(conf.Servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(p.ID), Address: raft.ServerAddress(p.RaftAddr)})
		}
		if err := raft.BootstrapCluster(rc, logs, s.bolt, snaps, s.trans, conf); err != nil {
			return nil, fmt.Errorf("bootstrap cluster: %w", err)
		}
		s.ident = identity{ClusterID: ClusterID(cfg.Bootstrap), NodeID: cfg.ID, Peers: cfg.Bootstrap}
		if err := writeIdentity(cfg.DataDir, s.ident); err != nil {
			return nil, err
		}
		bootstrapped = true
	}
	s.raft, err = raft.NewRaft(rc, s.fsm, logs, s.bolt, snaps, s.trans)
	if err != nil {
		return nil, fmt.Errorf("start raft: %w", err)
	}
	switch {
	case bootstrapped:
		s.log.Info("bootstrapped new cluster", "cluster", s.ident.ClusterID, "voters", len(cfg.Bootstrap))
	case id == nil:
		s.ident = identity{NodeID: cfg.ID}
		if err := writeIdentity(cfg.DataDir, s.ident); err != nil {
			return nil, err
		}
		if !existing {
			s.log.Info("started without state or peers; waiting to be added to a cluster")
		}
	default:
		s.log.Info("resumed from data dir", "cluster", s.ident.ClusterID, "last_index", s.raft.LastIndex())
	}
	s.wg.Add(1)
	go s.watchLeadership()
	ok = true
	return s, nil
}

// closeResources releases what Open acquired, in reverse order.
func (s *Store) closeResources() error {
	var errs []error
	if s.raft != nil {
		errs = append(errs, s.raft.Shutdown().Error())
	}
	if s.trans != nil {
		errs = append(errs, s.trans.Close())
	} else if s.layer != nil {
		errs = append(errs, s.layer.Close())
	}
	if s.bolt != nil {
		errs = append(errs, s.bolt.Close())
	}
	return errors.Join(errs...)
}

// Close stops the node cleanly: a leader first hands leadership to another
// voter, then Raft stops and the stores are closed. Close is idempotent.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		if s.raft.State() == raft.Leader && s.voterCount() > 1 {
			if err := s.raft.LeadershipTransfer().Error(); err != nil {
				s.log.Info("leadership transfer on close failed", "err", err)
			}
		}
		close(s.done)
		s.closeErr = s.closeResources()
		s.wg.Wait()
	})
	return s.closeErr
}

// Kill stops the node abruptly, as a crash would, for tests: the transport
// goes first so peers see the node vanish, without leadership transfer or
// snapshot. What was fsynced stays; nothing else is written.
func (s *Store) Kill() {
	s.closeOnce.Do(func() {
		close(s.done)
		var errs []error
		errs = append(errs, s.trans.Close())
		errs = append(errs, s.raft.Shutdown().Error())
		errs = append(errs, s.bolt.Close())
		s.closeErr = errors.Join(errs...)
		s.wg.Wait()
	})
}

// IsMember reports whether id is in this node's latest Raft configuration
// (as a voter or not).
func (s *Store) IsMember(id string) bool {
	f := s.raft.GetConfiguration()
	if f.Error() != nil {
		return false
	}
	for _, srv := range f.Configuration().Servers {
		if string(srv.ID) == id {
			return true
		}
	}
	return false
}

func (s *Store) voterCount() int {
	f := s.raft.GetConfiguration()
	if f.Error() != nil {
		return 0
	}
	n := 0
	for _, srv := range f.Configuration().Servers {
		if srv.Suffrage == raft.Voter {
			n++
		}
	}
	return n
}

// ID returns this node's ID.
func (s *Store) ID() string { return s.cfg.ID }

// RaftAddr returns the address Raft listens on.
func (s *Store) RaftAddr() string { return string(s.trans.LocalAddr()) }

// IsLeader reports whether this node currently believes it leads.
func (s *Store) IsLeader() bool { return s.raft.State() == raft.Leader }

// Leader returns the ID and API address of the leader this node knows of;
// empty strings when it knows none.
func (s *Store) Leader() (id, apiAddr string) {
	_, lid := s.raft.LeaderWithID()
	if lid == "" {
		return "", ""
	}
	return string(lid), s.apiAddr(string(lid))
}

// apiAddr returns a member's API address from the replicated state, or, until
// that has it, from the bootstrap voters this node was started with.
func (s *Store) apiAddr(id string) string {
	if a := s.fsm.apiAddrs()[id]; a != "" {
		return a
	}
	for _, p := range s.ident.Peers {
		if p.ID == id {
			return p.APIAddr
		}
	}
	return ""
}

// LastToken returns the last token this node has applied.
func (s *Store) LastToken() int64 { return s.fsm.counter() }

// Ready reports whether the node knows a leader and has applied every entry
// it knows to be committed.
func (s *Store) Ready() bool {
	if _, lid := s.raft.LeaderWithID(); lid == "" {
		return false
	}
	return s.raft.AppliedIndex() >= s.raft.CommitIndex()
}

// Snapshot takes a snapshot now and compacts the log down to TrailingLogs.
func (s *Store) Snapshot() error {
	if err := s.raft.Snapshot().Error(); err != nil {
		return fmt.Errorf("take snapshot: %w", translate(err))
	}
	return nil
}

// Member is one server of the Raft configuration as Status reports it.
type Member struct {
	ID       string `json:"id"`
	RaftAddr string `json:"raft_addr"`
	APIAddr  string `json:"api_addr"`
	Suffrage string `json:"suffrage"`
	Leader   bool   `json:"leader"`
}

// Status is this node's local view of the cluster.
type Status struct {
	ID           string
	State        string
	Term         uint64
	LastIndex    uint64
	CommitIndex  uint64
	AppliedIndex uint64
	LeaderID     string
	LeaderAPI    string
	LastToken    int64
	Members      []Member
	// FirstLogIndex is the oldest entry still in the log (it grows when the
	// log is compacted); LastSnapshotIndex the index of the last snapshot.
	FirstLogIndex     uint64
	LastSnapshotIndex uint64
}

// Status returns this node's local view (not a linearizable read).
func (s *Store) Status() Status {
	lid, lapi := s.Leader()
	st := Status{
		ID:           s.cfg.ID,
		State:        s.raft.State().String(),
		Term:         s.raft.CurrentTerm(),
		LastIndex:    s.raft.LastIndex(),
		CommitIndex:  s.raft.CommitIndex(),
		AppliedIndex: s.raft.AppliedIndex(),
		LeaderID:     lid,
		LeaderAPI:    lapi,
		LastToken:    s.fsm.counter(),
	}
	if fi, err := s.bolt.FirstIndex(); err == nil {
		st.FirstLogIndex = fi
	}
	st.LastSnapshotIndex, _ = strconv.ParseUint(s.raft.Stats()["last_snapshot_index"], 10, 64)
	apis := s.fsm.apiAddrs()
	if f := s.raft.GetConfiguration(); f.Error() == nil {
		for _, srv := range f.Configuration().Servers {
			st.Members = append(st.Members, Member{
				ID: string(srv.ID), RaftAddr: string(srv.Address), APIAddr: cmp.Or(apis[string(srv.ID)], s.apiAddr(string(srv.ID))),
				Suffrage: srv.Suffrage.String(), Leader: string(srv.ID) == lid,
			})
		}
	}
	sort.Slice(st.Members, func(i, j int) bool { return st.Members[i].ID < st.Members[j].ID })
	return st
}

// translate maps hashicorp/raft errors to this package's sentinels.
func translate(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, raft.ErrNotLeader), errors.Is(err, raft.ErrLeadershipTransferInProgress):
		return fmt.Errorf("%w (%v)", ErrNotLeader, err)
	case errors.Is(err, raft.ErrLeadershipLost):
		return ErrLeadershipLost
	case errors.Is(err, raft.ErrRaftShutdown):
		return ErrClosed
	case errors.Is(err, raft.ErrEnqueueTimeout):
		return fmt.Errorf("%w (%v)", ErrUnavailable, err)
	}
	return err
}

// notLeader returns ErrNotLeader, or ErrNoLeader when no leader is known.
func (s *Store) notLeader() error {
	if _, lid := s.raft.LeaderWithID(); lid == "" {
		return ErrNoLeader
	}
	return ErrNotLeader
}

// wait waits for f while honouring ctx.
func wait(ctx context.Context, f raft.Future) error {
	done := make(chan error, 1)
	go func() { done <- f.Error() }()
	select {
	case err := <-done:
		return translate(err)
	case <-ctx.Done():
		return ctx.Err()
	}
}
