package raftstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/fencegate/fencegate/internal/poll"
	"github.com/fencegate/fencegate/tokenapi"
	"github.com/hashicorp/raft"
)

// heldFile names the file in the data directory where a node keeps what
// each of its peers was seen to hold (see DESIGN.md, "A data directory put
// back from an older copy").
const heldFile = "held.json"

// DefaultHeldInterval is Config.HeldInterval's default.
const DefaultHeldInterval = time.Second

// Held is what a node saw a peer's data directory hold while that peer
// ran: its current term and its commit index. Both only grow for as long
// as the directory is the one the peer ran on: Raft persists a term before
// it acts in it, and a node's log (with its snapshots) always reaches every
// index it knew committed, since committed entries are never truncated. A
// directory that comes back below either was put back from an older copy.
type Held struct {
	// DataDirID names the directory the record is about; a replaced
	// member has a new one, and its record starts over.
	DataDirID   string `json:"data_dir_id"`
	Term        uint64 `json:"term"`
	CommitIndex uint64 `json:"commit_index"`
	// CommitTerm is the term of the entry at CommitIndex, 0 when unknown:
	// a copy whose log reaches that index with another entry there (an
	// uncommitted tail the leader later replaced) holds less than it.
	CommitTerm uint64 `json:"commit_term,omitempty"`
	// APIAddr is where the peer answered, asked again at the next start.
	APIAddr string `json:"api_addr,omitempty"`
}

// heldBook is a node's record of what its peers held, kept in heldFile.
type heldBook struct {
	dir string
	mu  sync.Mutex
	m   map[string]Held
	// saved is what heldFile holds: the record a restarted node starts
	// from, and so the only one it reports to others.
	saved map[string]Held
	// saveMu orders writes of the file.
	saveMu sync.Mutex
}

func readHeld(dir string) (*heldBook, error) {
	b := &heldBook{dir: dir, m: map[string]Held{}}
	data, err := os.ReadFile(filepath.Join(dir, heldFile))
	if errors.Is(err, os.ErrNotExist) {
		return b, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", heldFile, err)
	}
	if err := json.Unmarshal(data, &b.m); err != nil {
		return nil, fieldErr(fmt.Errorf("%w: %s in %s is not valid JSON (%v); it only records what the peers held: delete it to start without that record", ErrCorrupt, heldFile, dir, err), "DataDir")
	}
	if b.m == nil {
		b.m = map[string]Held{}
	}
	b.saved = maps.Clone(b.m)
	return b, nil
}

// snapshot returns a copy of the record.
func (b *heldBook) snapshot() map[string]Held {
	if b == nil {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.m) == 0 {
		return nil
	}
	return maps.Clone(b.m)
}

// observe records what peer id answered, and reports whether the record
// grew. A state of another data directory replaces the record (the member
// was replaced); of the same one, each field only grows.
func (b *heldBook) observe(id, api string, st NodeState) bool {
	if st.NodeID != id || st.DataDirID == "" || st.Phase != PhaseRunning || !st.HasState {
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	old, ok := b.m[id]
	h := Held{DataDirID: st.DataDirID, Term: st.Term, CommitIndex: st.CommitIndex, CommitTerm: st.CommitTerm, APIAddr: api}
	if ok && old.DataDirID == st.DataDirID {
		h.Term = max(h.Term, old.Term)
		if old.CommitIndex > h.CommitIndex || (old.CommitIndex == h.CommitIndex && h.CommitTerm == 0) {
			h.CommitIndex, h.CommitTerm = old.CommitIndex, old.CommitTerm
		}
		if api == "" {
			h.APIAddr = old.APIAddr
		}
	}
	if ok && h == old {
		return false
	}
	b.m[id] = h
	return true
}

// keepOnly forgets the nodes that are not in members, and reports whether
// it forgot any: the record follows the configuration, so that a member
// removed for good is neither asked nor waited for at the next start.
func (b *heldBook) keepOnly(members map[string]bool) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	forgot := false
	for id := range b.m {
		if !members[id] {
			delete(b.m, id)
			forgot = true
		}
	}
	return forgot
}

// save writes the record atomically and durably.
func (b *heldBook) save() error {
	b.saveMu.Lock()
	defer b.saveMu.Unlock()
	m := b.snapshot()
	data, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	if err := writeFileSync(b.dir, heldFile, data); err != nil {
		return err
	}
	b.mu.Lock()
	b.saved = m
	b.mu.Unlock()
	return nil
}

// durable returns a copy of the record as heldFile holds it. A node
// reports this one, not what it observed since: a node killed between an
// observation and its save starts again from the file, and what it
// reported must not have promised more.
func (b *heldBook) durable() map[string]Held {
	if b == nil {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.saved) == 0 {
		return nil
	}
	return maps.Clone(b.saved)
}

// writeFileSync writes dir/name atomically and durably: a temporary file,
// fsynced, renamed over name, and the directory fsynced.
func writeFileSync(dir, name string, data []byte) error {
	tmp := filepath.Join(dir, name+".tmp")
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	if _, err := f.Write(append(data, '\n')); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", name, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("sync %s: %w", name, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync data dir: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync data dir: %w", err)
	}
	return nil
}

// localDisk is what a data directory holds, as checkRolledBack compares
// it: raft.db's current term, the last index of its log or latest
// snapshot, the latest snapshot's index, and the term of a log entry.
type localDisk struct {
	term, last, snap uint64
	termAt           func(index uint64) (uint64, bool)
}

// checkRolledBack compares what this data directory holds with what the
// peers that answered saw it hold: a peer that saw this very directory
// (same data directory id) at a higher term, or with an index committed
// that the directory's log or snapshots do not reach or hold another entry
// at, means it was put back from an older copy. Such a node may have
// forgotten entries it acknowledged, some of them committed with its
// acknowledgement, and votes it cast; it must not vote or acknowledge
// again.
func checkRolledBack(cfg *Config, self identity, d localDisk, answers []probeResult) error {
	for _, a := range answers {
		if a.err != nil || (a.peer.ID != a.peer.APIAddr && a.st.NodeID != a.peer.ID) {
			continue
		}
		h, ok := a.st.Held[self.NodeID]
		if !ok || h.DataDirID != self.DataDirID {
			continue
		}
		var what string
		switch {
		case h.Term > d.term || h.CommitIndex > d.last:
			what = fmt.Sprintf("holds term %d and log up to index %d", d.term, d.last)
		case h.CommitTerm != 0 && h.CommitIndex > d.snap && d.termAt != nil:
			if t, ok := d.termAt(h.CommitIndex); ok && t != h.CommitTerm {
				what = fmt.Sprintf("holds an entry of term %d at index %d, not the committed one of term %d", t, h.CommitIndex, h.CommitTerm)
			}
		}
		if what == "" {
			continue
		}
		return fieldErr(fmt.Errorf("%w (%w): %s saw node %s run on data directory %s (%s) at term %d with index %d committed, but the directory now %s: it was put back from an older copy and may have forgotten entries and votes it acknowledged; it counts as lost: empty it and replace the node through membership",
			ErrDataDirLost, ErrRolledBack, a.st.NodeID, self.NodeID, self.DataDirID, cfg.DataDir, h.Term, h.CommitIndex, what), "DataDir")
	}
	return nil
}

// disk returns what the directory holds, for checkRolledBack.
func (p *Pending) disk() localDisk {
	return localDisk{term: p.diskTerm, last: p.diskLast, snap: p.diskSnap, termAt: func(i uint64) (uint64, bool) {
		var l raft.Log
		if err := p.logs.GetLog(i, &l); err != nil {
			return 0, false
		}
		return l.Term, true
	}}
}

// resumePeers are the nodes a node with state asks before it starts Raft:
// the voters it was started with or founded with, those it joined
// through, and every peer its record names, each once (by API address).
func (p *Pending) resumePeers() []tokenapi.Peer {
	var peers []tokenapi.Peer
	add := func(s tokenapi.Peer) {
		if s.ID != p.cfg.ID && s.APIAddr != "" && !containsAPI(peers, s.APIAddr) {
			peers = append(peers, s)
		}
	}
	for _, v := range p.cfg.Peers {
		add(v)
	}
	if p.ident.Founding != nil {
		for _, v := range p.ident.Founding.Peers {
			add(v)
		}
	}
	held := p.held.snapshot()
	ids := make([]string, 0, len(held))
	for id := range held {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		add(tokenapi.Peer{ID: id, APIAddr: held[id].APIAddr})
	}
	for _, api := range p.cfg.Join {
		add(tokenapi.Peer{ID: api, APIAddr: api})
	}
	return peers
}

func containsAPI(l []tokenapi.Peer, api string) bool {
	for _, s := range l {
		if s.APIAddr == api {
			return true
		}
	}
	return false
}

// checkResume is the check of a node whose data directory holds Raft
// state, before Raft starts. It asks its peers (resumePeers) for their
// state, and refuses to start when one holds another cluster
// (ErrForeignDataDir) or saw this directory hold more than it now does
// (ErrDataDirLost wrapping ErrRolledBack). It starts only once enough
// peers that hold state answered to make, with itself, a majority of the
// nodes it knows:
// a node that cannot show it is not behind what it acknowledged does not
// take part in Raft, and without such a majority it could not elect a
// leader anyway. Peers that do not answer are asked again every half
// second, for as long as ctx allows: a node that holds state waits for its
// peers as Raft would, and says what it waits for (Waiting).
func (p *Pending) checkResume(ctx context.Context) error {
	if p.cfg.Probe == nil {
		return nil
	}
	peers := p.resumePeers()
	if len(peers) == 0 {
		return nil
	}
	// A majority of the members this node last saw, or, before it saw
	// any, of the nodes it was given.
	need := (len(peers) + 1) / 2
	if n := len(p.held.snapshot()); n > 0 {
		need = (n + 1) / 2
	}
	lastLog := time.Now()
	for {
		answers := p.probeAll(ctx, peers, resumeProbeTimeout)
		if err := checkForeign(p.ident, answers); err != nil {
			return err
		}
		if err := checkRolledBack(&p.cfg, p.ident, p.disk(), answers); err != nil {
			return err
		}
		var silent []string
		answered := 0
		for _, a := range answers {
			switch {
			case a.err != nil:
				silent = append(silent, fmt.Sprintf("%s at %s does not answer (%v)", a.peer.ID, a.peer.APIAddr, a.err))
			case a.peer.ID != a.peer.APIAddr && a.st.NodeID != a.peer.ID:
				silent = append(silent, fmt.Sprintf("the node at %s says it is %q, not %s", a.peer.APIAddr, a.st.NodeID, a.peer.ID))
			case !a.st.HasState:
				// An empty node votes in nothing and saw nothing.
				silent = append(silent, fmt.Sprintf("%s holds no Raft state", a.st.NodeID))
			default:
				answered++
			}
		}
		if answered >= need {
			return nil
		}
		reason := fmt.Sprintf("%d of %d peers answered, %d needed to check that this data directory is not older than what its peers saw it hold: %s",
			answered, len(peers), need, strings.Join(silent, "; "))
		p.setWaiting(reason)
		if time.Since(lastLog) >= 5*time.Second {
			p.log.Info("waiting for peers before resuming", "waiting_for", reason)
			lastLog = time.Now()
		}
		if !poll.Sleep(ctx, 500*time.Millisecond) {
			return fmt.Errorf("waiting for peers before resuming (%s): %w", reason, ctx.Err())
		}
	}
}

// watchHeld asks every other member, each HeldInterval, for its state,
// and records what its data directory holds (see heldBook).
func (s *Store) watchHeld() {
	defer s.wg.Done()
	tick := time.NewTicker(s.cfg.HeldInterval)
	defer tick.Stop()
	for {
		select {
		case <-s.done:
			return
		case <-tick.C:
		}
		s.recordHeld()
	}
}

// recordHeld asks the members once, forgets the nodes that are no longer
// members, and saves the record if it changed.
func (s *Store) recordHeld() {
	ms, err := s.RaftMembers()
	if err != nil {
		return
	}
	ctx, cancel := s.closingContext(s.cfg.HeldInterval)
	defer cancel()
	var wg sync.WaitGroup
	var mu sync.Mutex
	members := map[string]bool{}
	for _, m := range ms {
		if m.ID != s.cfg.ID {
			members[m.ID] = true
		}
	}
	grew := s.held.keepOnly(members)
	for _, m := range ms {
		if m.ID == s.cfg.ID {
			continue
		}
		api := s.apiAddr(m.ID)
		if api == "" {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			st, err := s.cfg.Probe.State(ctx, api)
			if err == nil && s.held.observe(m.ID, api, st) {
				mu.Lock()
				grew = true
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if grew {
		if err := s.held.save(); err != nil {
			s.log.Error("record what peers hold", "err", err)
		}
	}
}
