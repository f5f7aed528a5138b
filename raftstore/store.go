package raftstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"

	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fencegate/fencegate/tokenapi"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
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
	// ErrCorrupt is returned by FSM.Apply for an entry it cannot decode,
	// and by its Restore for a snapshot it must not restore.
	ErrCorrupt = errors.New("raftstore: corrupt log entry")
	// ErrExhausted means the counter cannot hand out the tokens asked:
	// fewer remain below the largest token, 2^63-1 (math.MaxInt64). Every
	// token up to it can be handed out, to requests that ask for no more
	// than remain; none beyond it ever is. Not retryable.
	ErrExhausted = errors.New("raftstore: token counter exhausted")
	// ErrMustReplace means the data directory is empty but the cluster it
	// was to found exists: the node lost its data, or is new, and may only
	// come back through membership (remove, then add as a new member).
	ErrMustReplace = errors.New("raftstore: node must be replaced through membership")
	// ErrDataDirLost means the data directory once held Raft state and no
	// longer does (its log was deleted): it counts as lost.
	ErrDataDirLost = errors.New("raftstore: data dir lost its raft state")
	// ErrNoFounding means an empty data directory was given neither the
	// voters of a new cluster nor members to join.
	ErrNoFounding = errors.New("raftstore: empty data dir and no way to start")
	// ErrWaitTimeout means an empty node could neither found nor join
	// within Config.FoundingTimeout.
	ErrWaitTimeout = errors.New("raftstore: gave up waiting to found or join")
	// ErrStillVoter means a node asked to join is still listed as a voter:
	// the member it replaces must be removed first.
	ErrStillVoter = errors.New("raftstore: still listed as a voter")
	// ErrConflict means a membership change names an id or an address that
	// belongs to another member, or a member that already votes.
	ErrConflict = errors.New("raftstore: membership conflict")
	// ErrRolledBack means the data directory holds less than a peer saw
	// it hold while it ran (a lower term, or a log that ends before an
	// index it knew committed): it was put back from an older copy.
	// It is always wrapped with ErrDataDirLost.
	ErrRolledBack = errors.New("raftstore: data dir put back from an older copy")
	// ErrQuorumAtRisk means a membership change would leave fewer live
	// voters than a quorum needs.
	ErrQuorumAtRisk = errors.New("raftstore: change would lose quorum")
)

// FieldError is an error about one or more fields of a Config: Fields
// names them as Go spells them ("RaftAddr", "Peers"), so that a program
// that fills a Config from its own settings (command-line flags, a file)
// can name the setting that fixes it. Err is the error itself, wrapping one
// of the sentinels above (ErrBadConfig, ErrAddrInUse, ErrForeignDataDir,
// ...); its message says what is wrong in this package's terms.
type FieldError struct {
	Fields []string
	Err    error
}

func (e *FieldError) Error() string { return e.Err.Error() }

// Unwrap returns e.Err.
func (e *FieldError) Unwrap() error { return e.Err }

// fieldErr wraps err as being about fields of Config.
func fieldErr(err error, fields ...string) error { return &FieldError{Fields: fields, Err: err} }

// Defaults of Config (see DefaultConfig) and of the Batcher and ReadIndex
// settings the token service exposes beside it. Each is defined here only.
const (
	DefaultFoundingTimeout    = 2 * time.Minute
	DefaultHeartbeatTimeout   = time.Second
	DefaultElectionTimeout    = time.Second
	DefaultLeaderLeaseTimeout = 500 * time.Millisecond
	DefaultCommitTimeout      = 20 * time.Millisecond
	DefaultTransportTimeout   = 10 * time.Second
	DefaultSnapshotThreshold  = 8192
	DefaultSnapshotInterval   = 30 * time.Second
	DefaultTrailingLogs       = 10240
	DefaultRetainSnapshots    = 2

	// DefaultMaxBatch is the Batcher's cap on the tokens one allocation
	// takes (WithMaxBatch).
	DefaultMaxBatch = 4096
	// DefaultMaxInflight is the Batcher's cap on allocations in flight at
	// once (WithMaxInflight): one, so that the requests arriving meanwhile
	// form the next batch (a second one in flight cost a third more CPU
	// per token on the read-index path; see DESIGN.md, "Performance").
	DefaultMaxInflight = 1
	// DefaultReserveSize is ReadIndexConfig.ReserveSize's default, and
	// MaxReserveSize its largest value.
	DefaultReserveSize = 65536
	MaxReserveSize     = 1 << 30

	// CounterCeiling is the largest value an operator raises the counter
	// to ('fencegate token init', 'token restore') without forcing it:
	// 2^62, which leaves the cluster 2^62 tokens, 146,000 years at a
	// million tokens a second, before ErrExhausted. RaiseCounter itself
	// takes any value up to math.MaxInt64.
	CounterCeiling = 1 << 62
	// DefaultRoundTimeout is ReadIndexConfig.RoundTimeout's default.
	DefaultRoundTimeout = time.Second
)

// Config configures a Store. Zero durations and counts take the defaults
// stated on each field (the Default constants; DefaultConfig returns them
// filled in), as hashicorp/raft's Config does. Validate checks it; Prepare
// calls Validate.
type Config struct {
	// ID is this node's Raft server ID. Required.
	ID string
	// DataDir holds the Raft log (raft.db), snapshots and cluster.json. Required.
	DataDir string
	// RaftAddr is the TCP address Raft listens on and advertises. Required
	// unless Layer is set.
	RaftAddr string
	// APIAddr is this node's token API base URL, recorded in the replicated
	// state when this node leads.
	APIAddr string
	// Peers, the peers list, are the voters of a new cluster, the same on
	// every node. It is used only when the data directory holds no Raft
	// state, and then only once every other voter has answered through
	// Probe and none holds the state of a cluster founded without this
	// directory (see DESIGN.md, "Founding"). It must name this node.
	Peers []tokenapi.Peer
	// Join lists the API addresses of members of an existing cluster. A
	// node whose data directory holds no Raft state and that is given Join
	// starts Raft only once the committed configuration lists it as a
	// non-voter, or not at all; it grants no votes until it is promoted
	// (see DESIGN.md, "Joining"). Join wins over Peers.
	Join []string
	// Probe asks other nodes about themselves before Raft starts. Required
	// when Peers names other nodes or Join is set.
	Probe Prober
	// FoundingTimeout bounds how long a node with an empty data directory
	// waits for its peers (to found, or to be let in with Join) before
	// Start fails with ErrWaitTimeout. The default is 2m.
	FoundingTimeout time.Duration
	// WaitForFounding makes a node with an empty data directory wait
	// until its context ends instead of failing: when peers do not answer,
	// and also when they hold the cluster's state (it then starts once the
	// cluster lists it as a non-voter, after a membership replacement).
	// The default is false.
	WaitForFounding bool
	// Layer is the network Raft runs on (NewTCPLayer, NewTLSLayer). The
	// node owns it from Prepare on and closes it, also when Prepare or
	// Start fails. When it is set, RaftAddr may be empty: it is then
	// Layer.Addr(). The default is plain TCP on RaftAddr, dialled with Dial.
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
	// HeldInterval is how often a running node asks its peers (through
	// Probe) for their term and commit index, and records them in its
	// data directory, so that a peer put back from an older copy is
	// refused when it starts (see DESIGN.md). The default is 1s.
	HeldInterval time.Duration
}

// DefaultConfig returns a Config with every setting that has a default set
// to it: the Raft timings, snapshots and FoundingTimeout. The node's
// identity (ID, DataDir, RaftAddr or Layer, Peers or Join, Probe) is the
// caller's to fill in.
func DefaultConfig() Config {
	return Config{
		FoundingTimeout:    DefaultFoundingTimeout,
		HeartbeatTimeout:   DefaultHeartbeatTimeout,
		ElectionTimeout:    DefaultElectionTimeout,
		LeaderLeaseTimeout: DefaultLeaderLeaseTimeout,
		CommitTimeout:      DefaultCommitTimeout,
		TransportTimeout:   DefaultTransportTimeout,
		SnapshotThreshold:  DefaultSnapshotThreshold,
		SnapshotInterval:   DefaultSnapshotInterval,
		TrailingLogs:       DefaultTrailingLogs,
		RetainSnapshots:    DefaultRetainSnapshots,
		HeldInterval:       DefaultHeldInterval,
	}
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
	def(&c.HeartbeatTimeout, DefaultHeartbeatTimeout)
	def(&c.ElectionTimeout, DefaultElectionTimeout)
	def(&c.LeaderLeaseTimeout, DefaultLeaderLeaseTimeout)
	def(&c.CommitTimeout, DefaultCommitTimeout)
	def(&c.TransportTimeout, DefaultTransportTimeout)
	def(&c.SnapshotInterval, DefaultSnapshotInterval)
	def(&c.FoundingTimeout, DefaultFoundingTimeout)
	def(&c.HeldInterval, DefaultHeldInterval)
	if c.LeaderLeaseTimeout > c.HeartbeatTimeout {
		c.LeaderLeaseTimeout = c.HeartbeatTimeout
	}
	if c.SnapshotThreshold == 0 {
		c.SnapshotThreshold = DefaultSnapshotThreshold
	}
	if c.TrailingLogs == 0 {
		c.TrailingLogs = DefaultTrailingLogs
	}
	if c.RetainSnapshots <= 0 {
		c.RetainSnapshots = DefaultRetainSnapshots
	}
}

// Validate reports the first thing wrong with c as a *FieldError wrapping
// ErrBadConfig: a missing ID, DataDir or RaftAddr (RaftAddr may be empty
// when Layer is set), a negative duration, or a peers list that repeats a
// node, does not name this node, or gives it another Raft address.
func (c *Config) Validate() error {
	raftAddr := c.RaftAddr
	if raftAddr == "" && c.Layer != nil {
		raftAddr = c.Layer.Addr().String()
	}
	for _, d := range []struct {
		field string
		v     time.Duration
	}{{"FoundingTimeout", c.FoundingTimeout}, {"HeartbeatTimeout", c.HeartbeatTimeout}, {"ElectionTimeout", c.ElectionTimeout},
		{"LeaderLeaseTimeout", c.LeaderLeaseTimeout}, {"CommitTimeout", c.CommitTimeout}, {"TransportTimeout", c.TransportTimeout},
		{"SnapshotInterval", c.SnapshotInterval}, {"HeldInterval", c.HeldInterval}} {
		if d.v < 0 {
			return fieldErr(fmt.Errorf("%w: Config.%s is negative (%v); give a positive duration, or 0 for the default", ErrBadConfig, d.field, d.v), d.field)
		}
	}
	switch {
	case c.ID == "":
		return fieldErr(fmt.Errorf("%w: the node id (Config.ID) is empty", ErrBadConfig), "ID")
	case c.DataDir == "":
		return fieldErr(fmt.Errorf("%w: the data directory (Config.DataDir) is empty", ErrBadConfig), "DataDir")
	case raftAddr == "":
		return fieldErr(fmt.Errorf("%w: the raft address (Config.RaftAddr) is empty", ErrBadConfig), "RaftAddr")
	}
	if len(c.Peers) == 0 {
		return nil
	}
	ids, addrs := map[string]bool{}, map[string]bool{}
	self := false
	for _, p := range c.Peers {
		if p.ID == "" || p.RaftAddr == "" {
			return fieldErr(fmt.Errorf("%w: peer %q in the peers list has an empty id or raft address", ErrBadConfig, p.ID), "Peers")
		}
		if ids[p.ID] || addrs[p.RaftAddr] {
			return fieldErr(fmt.Errorf("%w: peer %s=%s appears twice in the peers list; list each node once", ErrBadConfig, p.ID, p.RaftAddr), "Peers")
		}
		ids[p.ID], addrs[p.RaftAddr] = true, true
		if p.ID == c.ID {
			self = true
			if p.RaftAddr != raftAddr {
				return fieldErr(fmt.Errorf("%w: the peers list gives node %s the raft address %s but Config.RaftAddr is %s; make them equal",
					ErrBadConfig, c.ID, p.RaftAddr, raftAddr), "Peers", "RaftAddr")
			}
		}
	}
	if !self {
		return fieldErr(fmt.Errorf("%w: the peers list does not name this node %q; add %s=%s=APIADDR to it or fix the node id",
			ErrBadConfig, c.ID, c.ID, raftAddr), "Peers", "ID")
	}
	return nil
}

// needsProbe reports whether starting from an empty directory asks peers.
func (c *Config) needsProbe() bool { return len(c.Join) > 0 || len(c.Peers) > 1 }

// Store is one node of the token Raft group.
type Store struct {
	cfg    Config
	log    *slog.Logger
	raft   *raft.Raft
	fsm    *fsm
	bolt   *raftboltdb.BoltStore
	stable *closingStable // bolt as Raft's stable store, closed before bolt
	trans  *raft.NetworkTransport
	gate   *voteGate // nil unless the node joined and is not yet promoted
	held   *heldBook // what the peers were seen to hold
	notify chan bool

	identMu sync.Mutex
	ident   identity

	leaderChanges atomic.Uint64
	// hooks are called on every leadership event (see onLeadershipEvent).
	hooksMu sync.Mutex
	hooks   []func()
	obs     *raft.Observer
	obsCh   chan raft.Observation

	closeOnce sync.Once
	closeErr  error
	done      chan struct{}
	wg        sync.WaitGroup
}

// closeStable waits for Raft's calls in the stable store (see
// closingStable) before bolt closes.
func (s *Store) closeStable() {
	if s.stable != nil {
		s.stable.close()
	}
}

// closeResources releases what Open acquired, in reverse order.
func (s *Store) closeResources() error {
	var errs []error
	if s.obs != nil {
		s.raft.DeregisterObserver(s.obs)
	}
	errs = append(errs, s.raft.Shutdown().Error())
	if s.gate != nil {
		errs = append(errs, s.gate.Close())
	}
	errs = append(errs, s.trans.Close())
	s.closeStable()
	errs = append(errs, s.bolt.Close())
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
		if s.obs != nil {
			s.raft.DeregisterObserver(s.obs)
		}
		errs = append(errs, s.raft.Shutdown().Error())
		if s.gate != nil {
			errs = append(errs, s.gate.Close())
		}
		s.closeStable()
		errs = append(errs, s.bolt.Close())
		s.closeErr = errors.Join(errs...)
		s.wg.Wait()
	})
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
	s.identMu.Lock()
	defer s.identMu.Unlock()
	if s.ident.Founding != nil {
		for _, p := range s.ident.Founding.Peers {
			if p.ID == id {
				return p.APIAddr
			}
		}
	}
	return ""
}

// APIAddrOf returns the API address the replicated state holds for member
// id, or "".
func (s *Store) APIAddrOf(id string) string { return s.fsm.apiAddrs()[id] }

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

// LastToken returns the last token this node has applied.
func (s *Store) LastToken() int64 { return s.fsm.counter() }

// Floor returns the counter as it was at least age ago by this node's
// clock: the value of the newest checkpoint the replicated state recorded
// at or before now minus age, and the leader's time of that checkpoint.
// Every token handed out for a request that arrived after at is above
// floor. floor is 0 and at the zero time when no checkpoint is that old.
// The read is local: a node that lags holds fewer checkpoints, each as
// true as the leader's. age must not be negative.
func (s *Store) Floor(age time.Duration) (floor int64, at time.Time, err error) {
	if age < 0 {
		return 0, time.Time{}, fmt.Errorf("%w: floor age %v is negative; give 0 or more", ErrBadConfig, age)
	}
	now := time.Now().UnixNano()
	t := now - int64(age)
	if int64(age) > now { // an age before 1970: nothing is that old
		return 0, time.Time{}, nil
	}
	cp, ok := s.fsm.floorAt(t)
	if !ok {
		return 0, time.Time{}, nil
	}
	return cp.Counter, time.Unix(0, cp.At).UTC(), nil
}

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

// Status is this node's local view of the cluster: the fields the token
// service's GET /v1/status returns, and the log's bounds.
type Status struct {
	tokenapi.StatusFields
	// FirstLogIndex is the oldest entry still in the log (it grows when the
	// log is compacted); LastSnapshotIndex the index of the last snapshot.
	FirstLogIndex     uint64
	LastSnapshotIndex uint64
}

// Status returns this node's local view (not a linearizable read).
func (s *Store) Status() Status {
	lid, lapi := s.Leader()
	st := Status{StatusFields: tokenapi.StatusFields{
		ID:           s.cfg.ID,
		ClusterID:    s.fsm.clusterID(),
		State:        s.raft.State().String(),
		Term:         s.raft.CurrentTerm(),
		LastIndex:    s.raft.LastIndex(),
		CommitIndex:  s.raft.CommitIndex(),
		AppliedIndex: s.raft.AppliedIndex(),
		LeaderID:     lid,
		LeaderAPI:    lapi,
		LastToken:    s.fsm.counter(),
	}}
	if fi, err := s.bolt.FirstIndex(); err == nil {
		st.FirstLogIndex = fi
	}
	st.LastSnapshotIndex, _ = strconv.ParseUint(s.raft.Stats()["last_snapshot_index"], 10, 64)
	apis := s.fsm.apiAddrs()
	if f := s.raft.GetConfiguration(); f.Error() == nil {
		for _, srv := range f.Configuration().Servers {
			st.Members = append(st.Members, tokenapi.Member{
				ID: string(srv.ID), RaftAddr: string(srv.Address), APIAddr: cmp.Or(apis[string(srv.ID)], s.apiAddr(string(srv.ID))),
				Suffrage: srv.Suffrage.String(), Leader: string(srv.ID) == lid,
			})
		}
	}
	sort.Slice(st.Members, func(i, j int) bool { return st.Members[i].ID < st.Members[j].ID })
	return st
}

// State is what this node tells its peers while Raft runs.
func (s *Store) State() NodeState {
	s.identMu.Lock()
	ident := s.ident
	s.identMu.Unlock()
	lid, _ := s.Leader()
	term, commit := s.raft.CurrentTerm(), s.raft.CommitIndex()
	var entry raft.Log
	if commit > 0 && s.bolt.GetLog(commit, &entry) != nil {
		entry.Term = 0 // compacted away: unknown
	}
	return NodeState{
		NodeID: s.cfg.ID, DataDirID: ident.DataDirID, Phase: PhaseRunning, HasState: true,
		ClusterID: cmp.Or(s.fsm.clusterID(), ident.ClusterID), Founding: ident.Founding,
		RaftState: s.raft.State().String(), Term: term, LastIndex: s.raft.LastIndex(),
		CommitIndex: commit, CommitTerm: entry.Term, AppliedIndex: s.raft.AppliedIndex(), LeaderID: lid,
		Held: s.held.durable(),
	}
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

// closingContext returns a context that ends after d, or as soon as the
// store closes, whichever comes first.
func (s *Store) closingContext(d time.Duration) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	go func() {
		select {
		case <-s.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
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
