package raftstore

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/fencegate/fencegate/tokenapi"
	"github.com/hashicorp/raft"
)

// identityFile names the file in the data directory that says which node of
// which cluster the directory belongs to.
const identityFile = "cluster.json"

// identity is the content of identityFile.
type identity struct {
	NodeID string `json:"node_id"`
	// DataDirID is drawn at random the first time the directory is used and
	// never changes. A peer that saw this directory empty when it founded
	// the cluster recorded this id, so a directory that was wiped (and so
	// drew a new id) is not mistaken for the one the peer saw.
	DataDirID string `json:"data_dir_id,omitempty"`
	// ClusterID is the id the cluster committed in its log, recorded here
	// once this node has applied it; empty until then.
	ClusterID string `json:"cluster_id,omitempty"`
	// Founding is the founding this node took part in; nil for a node that
	// joined through membership.
	Founding *Founding `json:"founding,omitempty"`
	// RaftStarted is set once this directory holds Raft state (after the
	// bootstrap, or when the node first starts Raft to join). A directory
	// that says so but holds no Raft state lost it.
	RaftStarted bool `json:"raft_started,omitempty"`
	// Joining is set while a node that joined as a non-voter has not yet
	// seen itself promoted: until then it grants no votes (see voteGate).
	Joining bool `json:"joining,omitempty"`
	// LegacyPeers is the bootstrap voter list that earlier versions wrote
	// as "peers"; it is read into Founding and not written again.
	LegacyPeers []tokenapi.Peer `json:"peers,omitempty"`
}

// Founding records how a node founded its cluster: the voters it
// bootstrapped with, and the data directory id of every one of them as this
// node saw them when it decided to found.
type Founding struct {
	Peers []tokenapi.Peer   `json:"peers"`
	Seen  map[string]string `json:"seen,omitempty"`
}

// newDataDirID returns a random data directory id.
func newDataDirID() string {
	b := make([]byte, 12)
	_, _ = rand.Read(b) // crypto/rand.Read never fails on Linux
	return "d-" + hex.EncodeToString(b)
}

// newClusterID returns a random cluster id.
func newClusterID() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return "c-" + hex.EncodeToString(b)
}

func readIdentity(dir string) (*identity, error) {
	b, err := os.ReadFile(filepath.Join(dir, identityFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read cluster identity: %w", err)
	}
	var id identity
	if err := json.Unmarshal(b, &id); err != nil {
		return nil, fieldErr(fmt.Errorf("%w: %s in %s is not valid JSON (%v); restore it or use an empty data directory", ErrForeignDataDir, identityFile, dir, err), "DataDir")
	}
	if id.Founding == nil && len(id.LegacyPeers) > 0 {
		id.Founding = &Founding{Peers: id.LegacyPeers}
	}
	id.LegacyPeers = nil
	return &id, nil
}

// writeIdentity writes the identity file atomically and durably (temp file,
// fsync, rename, fsync of the directory).
func writeIdentity(dir string, id identity) error {
	b, err := json.MarshalIndent(id, "", "  ")
	if err != nil {
		return err
	}
	if err := writeFileSync(dir, identityFile, b); err != nil {
		return fmt.Errorf("write cluster identity: %w", err)
	}
	return nil
}

// checkIdentity verifies that the data directory, if it already names a
// node, belongs to this node.
func checkIdentity(cfg *Config, id *identity) error {
	if id == nil || id.NodeID == cfg.ID {
		return nil
	}
	return fieldErr(fmt.Errorf("%w: data directory %s belongs to node %q, not %q; start node %q with it or give %q an empty data directory",
		ErrForeignDataDir, cfg.DataDir, id.NodeID, cfg.ID, id.NodeID, cfg.ID), "DataDir", "ID")
}

// recordKey names the data directory's identity in raft.db's stable store,
// beside Raft's own current term and vote.
var recordKey = []byte("fencegate.identity")

// keyCurrentTerm is the key hashicorp/raft stores its current term under.
var keyCurrentTerm = []byte("CurrentTerm")

// diskRecord is what raft.db says about whose state it holds: written
// before Raft first runs on the directory (at founding and at join, and
// on the first start of a directory written before records existed), and
// again when the node records its cluster id. A raft.db that disagrees
// with cluster.json was not written in this directory.
type diskRecord struct {
	NodeID    string `json:"node_id"`
	DataDirID string `json:"data_dir_id"`
	ClusterID string `json:"cluster_id,omitempty"`
}

func recordOf(id identity) diskRecord {
	return diskRecord{NodeID: id.NodeID, DataDirID: id.DataDirID, ClusterID: id.ClusterID}
}

// readRecord returns raft.db's record, nil when it holds none.
func readRecord(stable raft.StableStore) (*diskRecord, error) {
	b, err := stable.Get(recordKey)
	if err != nil {
		if err.Error() == "not found" { // raft-boltdb's ErrKeyNotFound, as raft itself tests it
			return nil, nil
		}
		return nil, fmt.Errorf("read data dir record from raft.db: %w", err)
	}
	if len(b) == 0 {
		return nil, nil
	}
	var r diskRecord
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("%w: the data dir record in raft.db is not valid JSON (%v)", ErrCorrupt, err)
	}
	return &r, nil
}

// writeRecord writes raft.db's record (fsynced, as every stable store write).
func writeRecord(stable raft.StableStore, r diskRecord) error {
	b, _ := json.Marshal(r) // a struct of strings always marshals
	if err := stable.Set(recordKey, b); err != nil {
		return fmt.Errorf("write data dir record to raft.db: %w", err)
	}
	return nil
}

// diskState is what the three parts of a data directory hold: raft.db's
// log and stable store, and the snapshots.
type diskState struct {
	rec         *diskRecord
	term        uint64
	first, last uint64
	snaps       []*raft.SnapshotMeta // newest first
}

func (d diskState) hasLog() bool { return d.term > 0 || d.last > 0 }

func readDiskState(logs raft.LogStore, stable raft.StableStore, snaps raft.SnapshotStore) (diskState, error) {
	var d diskState
	var err error
	if d.rec, err = readRecord(stable); err != nil {
		return d, err
	}
	if d.term, err = stable.GetUint64(keyCurrentTerm); err != nil {
		if err.Error() != "not found" {
			return d, fmt.Errorf("read current term: %w", err)
		}
		d.term = 0
	}
	if d.first, err = logs.FirstIndex(); err != nil {
		return d, fmt.Errorf("read first log index: %w", err)
	}
	if d.last, err = logs.LastIndex(); err != nil {
		return d, fmt.Errorf("read last log index: %w", err)
	}
	if d.snaps, err = snaps.List(); err != nil {
		return d, fmt.Errorf("list snapshots: %w", err)
	}
	return d, nil
}

// snapshotClusterID returns the cluster id in a snapshot's state, "" when
// it holds none.
func snapshotClusterID(snaps raft.SnapshotStore, meta *raft.SnapshotMeta) (string, error) {
	_, rc, err := snaps.Open(meta.ID)
	if err != nil {
		return "", fmt.Errorf("open snapshot %s: %w", meta.ID, err)
	}
	defer rc.Close()
	var s fsmState
	if err := json.NewDecoder(io.LimitReader(rc, 1<<20)).Decode(&s); err != nil {
		return "", fmt.Errorf("%w: snapshot %s: %v", ErrCorrupt, meta.ID, err)
	}
	return s.ClusterID, nil
}

// checkDisk refuses a data directory whose parts disagree: a node opens
// only when cluster.json (file, nil when missing), raft.db and the
// snapshots are all its own and all there. Losing any part of a directory
// is losing the directory: the node may have forgotten votes it cast and
// entries it acknowledged, and must come back through membership (see
// DESIGN.md, "What a data directory is"). It reports whether raft.db lacks
// its record, or the record lacks the cluster id, and must get it before
// Raft runs.
func checkDisk(cfg *Config, file *identity, d diskState, snaps raft.SnapshotStore) (needRecord bool, err error) {
	dir := cfg.DataDir
	lost := func(cause error, format string, args ...any) error {
		msg := fmt.Sprintf(format, args...)
		if cause != nil {
			return fmt.Errorf("%w (%w): %s; it counts as lost: empty it and replace the node through membership", ErrDataDirLost, cause, msg)
		}
		return fmt.Errorf("%w: %s; it counts as lost: empty it and replace the node through membership", ErrDataDirLost, msg)
	}
	if file == nil {
		if d.hasLog() || d.rec != nil || len(d.snaps) > 0 {
			return false, lost(nil, "%s holds Raft state (raft.db or snapshots) but no %s, which says whose state it is", dir, identityFile)
		}
		return true, nil
	}
	if r := d.rec; r != nil {
		if r.NodeID != cfg.ID || r.DataDirID != file.DataDirID {
			return false, lost(ErrForeignDataDir, "raft.db in %s was written by node %s in data directory %s, not by node %s in this one (%s): it was copied from elsewhere",
				dir, r.NodeID, r.DataDirID, cfg.ID, file.DataDirID)
		}
		if r.ClusterID != "" && file.ClusterID != "" && r.ClusterID != file.ClusterID {
			return false, lost(ErrForeignDataDir, "raft.db in %s holds the state of cluster %s, %s says cluster %s", dir, r.ClusterID, identityFile, file.ClusterID)
		}
	}
	if len(d.snaps) > 0 {
		latest := d.snaps[0]
		cid, err := snapshotClusterID(snaps, latest)
		if err != nil {
			return false, err
		}
		for _, known := range []string{file.ClusterID, recOrEmpty(d.rec)} {
			if cid != "" && known != "" && cid != known {
				return false, lost(ErrForeignDataDir, "snapshot %s in %s holds the state of cluster %s, this node belongs to cluster %s", latest.ID, dir, cid, known)
			}
		}
		if !d.hasLog() {
			return false, lost(nil, "raft.db in %s is gone or empty (no term, no log) while snapshots up to index %d remain: node %s forgot its votes and every entry after that index",
				dir, latest.Index, cfg.ID)
		}
		if latest.Term > d.term {
			return false, lost(nil, "raft.db in %s is older than its snapshots: its current term is %d, the latest snapshot (index %d) was taken in term %d; node %s forgot votes it cast",
				dir, d.term, latest.Index, latest.Term, cfg.ID)
		}
	}
	if d.first > 1 {
		switch {
		case len(d.snaps) == 0:
			return false, lost(nil, "raft.db in %s holds the log from index %d and no snapshot holds entries 1 to %d: the snapshots are gone",
				dir, d.first, d.first-1)
		case d.snaps[0].Index < d.first-1:
			return false, lost(nil, "raft.db in %s holds the log from index %d but the latest snapshot ends at index %d: entries %d to %d are nowhere",
				dir, d.first, d.snaps[0].Index, d.snaps[0].Index+1, d.first-1)
		}
	}
	// A record without the cluster id (a crash between writing
	// cluster.json and raft.db) is completed.
	return d.rec == nil || *d.rec != recordOf(*file), nil
}

func recOrEmpty(r *diskRecord) string {
	if r == nil {
		return ""
	}
	return r.ClusterID
}
