package raftstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/fencegate/fencegate/internal/poll"
	"github.com/fencegate/fencegate/tokenapi"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"go.etcd.io/bbolt"
)

// probeTimeout bounds one question to one peer before Raft starts.
const probeTimeout = 2 * time.Second

// resumeProbeTimeout bounds the check of a node that holds state against
// its peers: a restart must not wait for peers that are down.
const resumeProbeTimeout = time.Second

// Pending is a node whose data directory and Raft listener are open but
// whose Raft has not started: an empty node deciding whether it may found
// or join. Its State is what it tells peers meanwhile.
type Pending struct {
	cfg      Config
	log      *slog.Logger
	layer    Layer
	bolt     *raftboltdb.BoltStore
	snaps    *raft.FileSnapshotStore
	logs     *raft.LogCache
	existing bool
	// needRecord is set while raft.db holds no record of this directory,
	// or one without the cluster id: Start writes it before Raft runs.
	needRecord bool
	// diskTerm, diskLast and diskSnap are what the directory holds:
	// raft.db's current term, the last index of its log or latest
	// snapshot, and the latest snapshot's index.
	diskTerm, diskLast, diskSnap uint64
	// held is this node's record of what its peers held.
	held *heldBook

	mu      sync.Mutex
	ident   identity
	phase   string
	waiting string
	closed  bool
}

// Open is Prepare followed by Start without a deadline, for nodes that need
// no API while they start (one-node clusters, tests).
func Open(cfg Config) (*Store, error) {
	p, err := Prepare(cfg)
	if err != nil {
		return nil, err
	}
	return p.Start(context.Background())
}

// Prepare opens the node's data directory and Raft listener (or takes
// cfg.Layer) without starting Raft. A directory whose raft.db, snapshots
// and cluster.json do not agree (one of them lost, or copied from another
// node or cluster) is refused with ErrDataDirLost before anything is
// written to it (see DESIGN.md, "What a data directory is"). A directory
// used for the first time gets its random data directory id, durably,
// before Prepare returns: peers may record it. On error, cfg.Layer is
// closed.
func Prepare(cfg Config) (_ *Pending, err error) {
	p := &Pending{cfg: cfg, log: cfg.Logger, layer: cfg.Layer}
	defer func() {
		if err != nil {
			p.Close()
		}
	}()
	if cfg.Layer != nil && cfg.RaftAddr == "" {
		cfg.RaftAddr = cfg.Layer.Addr().String()
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.setDefaults()
	if cfg.Probe == nil && cfg.needsProbe() {
		return nil, fmt.Errorf("%w: Probe is required to found with other voters or to join", ErrBadConfig)
	}
	id, err := readIdentity(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	if err := checkIdentity(&cfg, id); err != nil {
		return nil, err
	}
	p.cfg, p.log = cfg, cfg.Logger
	// Listen first: a taken port fails before anything is written.
	if p.layer == nil {
		ln, err := Listen("raft", cfg.RaftAddr)
		if err != nil {
			return nil, fieldErr(err, "RaftAddr")
		}
		p.layer = NewTCPLayer(ln, cfg.Dial)
	}
	if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
		return nil, fmt.Errorf("create data dir: %w", err)
	}
	// A damaged raft.db would crash bbolt (SIGBUS past a cut-short end, a
	// panic in its own goroutine on a page that is not one): read its
	// structure first, and refuse it as lost.
	if err := checkBoltFile(filepath.Join(cfg.DataDir, "raft.db")); err != nil {
		return nil, fieldErr(fmt.Errorf("%w: %v; it counts as lost: empty the data directory and replace the node through membership", ErrDataDirLost, err), "DataDir")
	}
	p.bolt, err = raftboltdb.New(raftboltdb.Options{
		Path: filepath.Join(cfg.DataDir, "raft.db"),
		// The freelist is rebuilt on open instead of written on every
		// commit (as Consul runs raft-boltdb): less to write per fsync.
		BoltOptions: &bbolt.Options{Timeout: time.Second, NoFreelistSync: true, FreelistType: bbolt.FreelistMapType},
		NoSync:      false, // every log append is fsynced
	})
	if err != nil {
		if errors.Is(err, bbolt.ErrTimeout) {
			return nil, fieldErr(fmt.Errorf("%w: %s is open in another process; stop that process or use another data directory", ErrDataDirLocked, cfg.DataDir), "DataDir")
		}
		return nil, fmt.Errorf("open raft log: %w", err)
	}
	if p.snaps, err = raft.NewFileSnapshotStoreWithLogger(cfg.DataDir, cfg.RetainSnapshots, newHCLogger(p.log, "raft")); err != nil {
		return nil, fmt.Errorf("open snapshot store: %w", err)
	}
	if p.logs, err = raft.NewLogCache(1024, p.bolt); err != nil {
		return nil, fmt.Errorf("create log cache: %w", err)
	}
	// Partial loss is loss: raft.db, the snapshots and cluster.json must
	// all be there and all be this directory's before anything is written.
	disk, err := readDiskState(p.logs, p.bolt, p.snaps)
	if err != nil {
		return nil, err
	}
	if p.needRecord, err = checkDisk(&cfg, id, disk, p.snaps); err != nil {
		return nil, err
	}
	p.diskTerm, p.diskLast = disk.term, disk.last
	if len(disk.snaps) > 0 {
		p.diskSnap = disk.snaps[0].Index
		p.diskLast = max(p.diskLast, p.diskSnap)
	}
	if p.held, err = readHeld(cfg.DataDir); err != nil {
		return nil, err
	}
	if id == nil {
		id = &identity{NodeID: cfg.ID}
	}
	p.ident = *id
	if p.ident.DataDirID == "" {
		p.ident.DataDirID = newDataDirID()
		if err := writeIdentity(cfg.DataDir, p.ident); err != nil {
			return nil, err
		}
	}
	if p.existing, err = raft.HasExistingState(p.logs, p.bolt, p.snaps); err != nil {
		return nil, fmt.Errorf("check raft state: %w", err)
	}
	switch {
	case p.existing:
		p.phase = PhaseRunning
	case len(cfg.Join) > 0 || p.ident.Joining:
		p.phase = PhaseJoining
	default:
		p.phase = PhaseFounding
	}
	return p, nil
}

// State is what this node tells its peers while it decides.
func (p *Pending) State() NodeState {
	p.mu.Lock()
	defer p.mu.Unlock()
	st := NodeState{
		NodeID: p.ident.NodeID, DataDirID: p.ident.DataDirID, Phase: p.phase, HasState: p.existing,
		ClusterID: p.ident.ClusterID, Founding: p.ident.Founding, Held: p.held.durable(),
	}
	if p.phase == PhaseFounding {
		st.Peers = p.cfg.Peers
	}
	return st
}

// Waiting says what the node waits for, or "" while it does not wait.
func (p *Pending) Waiting() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.waiting
}

func (p *Pending) setWaiting(s string) {
	p.mu.Lock()
	p.waiting = s
	p.mu.Unlock()
}

// Close releases what Prepare opened. Start closes the Pending itself when
// it fails; after Start succeeds, the Store owns everything.
func (p *Pending) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil
	}
	p.closed = true
	var errs []error
	if p.bolt != nil {
		errs = append(errs, p.bolt.Close())
	}
	if p.layer != nil {
		errs = append(errs, p.layer.Close())
	}
	return errors.Join(errs...)
}

// Start decides how this node starts and starts Raft:
//
//   - a directory that holds Raft state resumes (after checking that its
//     peers do not belong to another cluster);
//   - a directory that once held Raft state and lost it is refused
//     (Prepare already refused one that lost part of it);
//   - an empty directory with Join waits until the cluster lets it in;
//   - an empty directory with Peers founds the cluster once every
//     voter answered and the founding is safe, and is refused when the
//     cluster exists without it (ErrMustReplace).
//
// On error, Raft never ran and p is closed.
func (p *Pending) Start(ctx context.Context) (_ *Store, err error) {
	defer func() {
		if err != nil {
			p.Close()
		}
	}()
	cfg := &p.cfg
	var (
		found bool
		seen  map[string]string
		join  bool
	)
	switch {
	case p.existing:
		if err := p.checkResume(ctx); err != nil {
			return nil, err
		}
	case p.ident.RaftStarted && !p.ident.Joining:
		return nil, fmt.Errorf("%w: %s once held the Raft state of node %s and no longer does (its log is gone); it counts as lost: empty it and replace the node through membership",
			ErrDataDirLost, cfg.DataDir, cfg.ID)
	case len(cfg.Join) > 0 || p.ident.Joining:
		// A joining node that holds nothing yet (it was not added, or
		// lost what it received as a non-voter, which counted for
		// nothing) asks again.
		if len(p.contacts()) == 0 {
			return nil, fieldErr(fmt.Errorf("%w: %s was joining a cluster and holds no Raft state yet; give members to join (Config.Join)", ErrNoFounding, cfg.DataDir), "Join")
		}
		if err := p.waitJoin(ctx); err != nil {
			return nil, err
		}
		join = true
	case len(cfg.Peers) > 0:
		if found, seen, err = p.waitFounding(ctx); err != nil {
			return nil, err
		}
		join = !found
	default:
		return nil, fieldErr(fmt.Errorf("%w: %s holds no Raft state; give the voters of a new cluster (the peers list) or members to join (Config.Join)", ErrNoFounding, cfg.DataDir), "Peers", "Join")
	}
	p.setWaiting("")

	hcl := newHCLogger(p.log, "raft")
	trans := raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream:  raftLayer{p.layer},
		MaxPool: 4,
		Timeout: cfg.TransportTimeout,
		Logger:  hcl,
	})
	s := &Store{cfg: *cfg, log: p.log, fsm: newFSM(), bolt: p.bolt, trans: trans, held: p.held, notify: make(chan bool, 16), done: make(chan struct{})}
	// From here the store owns the listener (through the transport) and
	// the log; p must not close them again.
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	defer func() {
		if s.raft == nil { // Raft never started
			if s.gate != nil {
				s.gate.Close()
			}
			trans.Close()
			p.bolt.Close()
		}
	}()

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

	ident, dirty := p.ident, !p.ident.RaftStarted
	if p.needRecord {
		// Before Raft writes anything: from now on raft.db says whose
		// state it holds (a directory of an earlier version gets its
		// record on its first start).
		if err := writeRecord(p.bolt, recordOf(ident)); err != nil {
			return nil, err
		}
	}
	switch {
	case found:
		// The record first: a slower founder that asks once this node
		// holds state must find its own data directory id in it.
		ident.Founding = &Founding{Peers: cfg.Peers, Seen: seen}
		if err := writeIdentity(cfg.DataDir, ident); err != nil {
			return nil, err
		}
		// From here peers are told this node holds state, with its
		// record: none of them may take it for an empty peer while Raft
		// starts and before the Store answers for it.
		p.mu.Lock()
		p.ident, p.existing, p.phase = ident, true, PhaseRunning
		p.mu.Unlock()
		var conf raft.Configuration
		for _, v := range cfg.Peers {
			conf.Servers = append(conf.Servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(v.ID), Address: raft.ServerAddress(v.RaftAddr)})
		}
		if err := raft.BootstrapCluster(rc, p.logs, p.bolt, p.snaps, trans, conf); err != nil {
			return nil, fmt.Errorf("bootstrap cluster: %w", err)
		}
	case join:
		ident.Joining, dirty = true, true
		p.mu.Lock()
		p.ident, p.existing, p.phase = ident, true, PhaseRunning
		p.mu.Unlock()
	}
	if dirty {
		// Once Raft may run, a directory without Raft state is a lost one.
		ident.RaftStarted = true
		if err := writeIdentity(cfg.DataDir, ident); err != nil {
			return nil, err
		}
	}
	s.ident = ident

	var rt raft.Transport = trans
	if ident.Joining {
		s.gate = newVoteGate(trans)
		rt = s.gate
	}
	s.stable = &closingStable{StableStore: p.bolt}
	s.raft, err = raft.NewRaft(rc, s.fsm, p.logs, s.stable, p.snaps, rt)
	if err != nil {
		return nil, fmt.Errorf("start raft: %w", err)
	}
	if s.gate != nil {
		s.gate.start(s.isVoter, s.promoted)
	}
	s.obsCh = make(chan raft.Observation, 16)
	s.obs = raft.NewObserver(s.obsCh, false, func(o *raft.Observation) bool {
		_, ok := o.Data.(raft.LeaderObservation)
		return ok
	})
	s.raft.RegisterObserver(s.obs)
	switch {
	case found:
		s.log.Info("founded new cluster", "voters", len(cfg.Peers))
	case join:
		s.log.Info("joining: Raft started; votes withheld until this node is promoted")
	default:
		s.log.Info("resumed from data dir", "cluster", ident.ClusterID, "last_index", s.raft.LastIndex())
	}
	s.wg.Add(3)
	go s.watchLeadership()
	go s.watchClusterID()
	go s.watchObservations()
	if cfg.Probe != nil {
		s.wg.Add(1)
		go s.watchHeld()
	}
	return s, nil
}

// isVoter reports whether this node is a voter in its latest configuration.
func (s *Store) isVoter() bool {
	for _, srv := range s.raft.GetConfiguration().Configuration().Servers {
		if srv.ID == raft.ServerID(s.cfg.ID) {
			return srv.Suffrage == raft.Voter
		}
	}
	return false
}

// promoted records that this node, which joined, is now a voter.
func (s *Store) promoted() {
	if err := s.updateIdentity(func(id *identity) bool { id.Joining = false; return true }); err != nil {
		s.log.Error("record promotion", "err", err)
	}
	s.log.Info("promoted to voter: votes no longer withheld")
}

// updateIdentity changes the identity under its lock and, when change
// reports a change, writes it; writes never interleave.
func (s *Store) updateIdentity(change func(*identity) bool) error {
	s.identMu.Lock()
	defer s.identMu.Unlock()
	before := recordOf(s.ident)
	if !change(&s.ident) {
		return nil
	}
	if err := writeIdentity(s.cfg.DataDir, s.ident); err != nil {
		return err
	}
	// cluster.json first: a crash in between leaves raft.db's record
	// without the new cluster id, which checkDisk accepts and the next
	// start completes.
	if rec := recordOf(s.ident); rec != before {
		return writeRecord(s.bolt, rec)
	}
	return nil
}

// others returns the voters of Peers other than this node.
func (p *Pending) others() []tokenapi.Peer {
	var out []tokenapi.Peer
	for _, v := range p.cfg.Peers {
		if v.ID != p.cfg.ID {
			out = append(out, v)
		}
	}
	return out
}

// probeAll asks every server in peers for its state, at once.
func (p *Pending) probeAll(ctx context.Context, peers []tokenapi.Peer, timeout time.Duration) []probeResult {
	out := make([]probeResult, len(peers))
	var wg sync.WaitGroup
	for i, peer := range peers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			st, err := p.cfg.Probe.State(ctx, peer.APIAddr)
			out[i] = probeResult{peer: peer, st: st, err: err}
		}()
	}
	wg.Wait()
	return out
}

// waitFounding waits until the founding rule lets this node found (found
// is true, with the data directory ids to record), or, with
// WaitForFounding, until the cluster lets it in as a non-voter (found is
// false). It fails at once when the cluster exists without this node,
// unless told to wait.
func (p *Pending) waitFounding(ctx context.Context) (found bool, seen map[string]string, err error) {
	others := p.others()
	if len(others) == 0 {
		return true, map[string]string{p.cfg.ID: p.ident.DataDirID}, nil
	}
	start := time.Now()
	lastLog := start // the first progress line after 5s: a short wait says nothing
	for {
		d := decideFounding(p.ident, p.cfg.Peers, p.probeAll(ctx, others, probeTimeout))
		if d.found {
			return true, d.seen, nil
		}
		reason := strings.Join(d.waiting, "; ")
		if d.refuse != nil {
			if !p.cfg.WaitForFounding {
				return false, nil, d.refuse
			}
			reason = d.refuse.Error()
			// Let in through membership meanwhile?
			if conf, err := p.configuration(ctx, others); err == nil && listedAsNonvoter(conf, p.cfg.ID, p.cfg.RaftAddr) {
				if jd := decideJoin(p.cfg.ID, p.cfg.RaftAddr, conf); jd.join {
					p.mu.Lock()
					p.phase = PhaseJoining
					p.mu.Unlock()
					p.log.Info("the cluster lists this node as a non-voter: joining", "cluster", conf.ClusterID)
					return false, nil, nil
				}
			}
		}
		p.setWaiting(reason)
		if time.Since(lastLog) >= 5*time.Second {
			p.log.Info("waiting to found the cluster", "waiting_for", reason)
			lastLog = time.Now()
		}
		if !p.cfg.WaitForFounding && time.Since(start) >= p.cfg.FoundingTimeout {
			return false, nil, fmt.Errorf("%w: node %s founds a cluster only when every voter answers and none holds the cluster's state; after %v: %s",
				ErrWaitTimeout, p.cfg.ID, p.cfg.FoundingTimeout, reason)
		}
		if !poll.Sleep(ctx, 500*time.Millisecond) {
			return false, nil, fmt.Errorf("waiting to found the cluster (%s): %w", reason, ctx.Err())
		}
	}
}

func listedAsNonvoter(conf Configuration, id, raftAddr string) bool {
	for _, m := range conf.Members {
		if m.ID == id && m.RaftAddr == raftAddr && m.Suffrage == "Nonvoter" {
			return true
		}
	}
	return false
}

// contacts are the API addresses a joining node asks: those it joins
// through (Config.Join), or, given none, its peers. Never both: the peers
// are the founding list, which may name a member removed since, whose
// certificate still verifies and who would answer as its own leader.
func (p *Pending) contacts() []tokenapi.Peer {
	var out []tokenapi.Peer
	for _, api := range p.cfg.Join {
		out = append(out, tokenapi.Peer{APIAddr: api})
	}
	if len(out) > 0 {
		return out
	}
	for _, v := range p.others() {
		if !slices.ContainsFunc(out, func(o tokenapi.Peer) bool { return o.APIAddr == v.APIAddr }) {
			out = append(out, v)
		}
	}
	return out
}

// configuration asks the given nodes, one after another, for the leader's
// committed configuration, and returns the first answer.
func (p *Pending) configuration(ctx context.Context, nodes []tokenapi.Peer) (Configuration, error) {
	var errs []error
	for _, n := range nodes {
		cctx, cancel := context.WithTimeout(ctx, 2*probeTimeout)
		conf, err := p.cfg.Probe.Configuration(cctx, n.APIAddr)
		cancel()
		if err == nil {
			return conf, nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", n.APIAddr, err))
	}
	return Configuration{}, fmt.Errorf("no leader's configuration from %w", errors.Join(errs...))
}

// waitJoin waits until the committed configuration lets this node start
// Raft to join: it lists the node as a non-voter at its address, or not at
// all.
func (p *Pending) waitJoin(ctx context.Context) error {
	start := time.Now()
	lastLog := start // the first progress line after 5s: a short wait says nothing
	contacts := p.contacts()
	for {
		var reason string
		conf, err := p.configuration(ctx, contacts)
		if err == nil {
			d := decideJoin(p.cfg.ID, p.cfg.RaftAddr, conf)
			if d.join {
				p.log.Info("joining cluster", "cluster", conf.ClusterID, "leader", conf.LeaderID)
				return nil
			}
			if !p.cfg.WaitForFounding {
				return d.refuse
			}
			reason = d.refuse.Error()
		} else {
			reason = strings.ReplaceAll(err.Error(), "\n", "; ")
		}
		p.setWaiting(reason)
		if time.Since(lastLog) >= 5*time.Second {
			p.log.Info("waiting to join the cluster", "waiting_for", reason)
			lastLog = time.Now()
		}
		if !p.cfg.WaitForFounding && time.Since(start) >= p.cfg.FoundingTimeout {
			return fmt.Errorf("%w: node %s joins only once a leader confirms the cluster lists it as a non-voter or not at all; after %v: %s",
				ErrWaitTimeout, p.cfg.ID, p.cfg.FoundingTimeout, reason)
		}
		if !poll.Sleep(ctx, 500*time.Millisecond) {
			return fmt.Errorf("waiting to join the cluster (%s): %w", reason, ctx.Err())
		}
	}
}
