package raftstore

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
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
	LegacyPeers []Server `json:"peers,omitempty"`
}

// Founding records how a node founded its cluster: the voters it
// bootstrapped with, and the data directory id of every one of them as this
// node saw them when it decided to found.
type Founding struct {
	Peers []Server          `json:"peers"`
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
	tmp := filepath.Join(dir, identityFile+".tmp")
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("write cluster identity: %w", err)
	}
	if _, err := f.Write(append(b, '\n')); err != nil {
		f.Close()
		return fmt.Errorf("write cluster identity: %w", err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("sync cluster identity: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write cluster identity: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, identityFile)); err != nil {
		return fmt.Errorf("write cluster identity: %w", err)
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

// checkIdentity verifies that the data directory, if it already names a
// node, belongs to this node.
func checkIdentity(cfg *Config, id *identity) error {
	if id == nil || id.NodeID == cfg.ID {
		return nil
	}
	return fieldErr(fmt.Errorf("%w: data directory %s belongs to node %q, not %q; start node %q with it or give %q an empty data directory",
		ErrForeignDataDir, cfg.DataDir, id.NodeID, cfg.ID, id.NodeID, cfg.ID), "DataDir", "ID")
}
