package raftstore

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// identityFile names the file in the data directory that says which node of
// which cluster the directory belongs to.
const identityFile = "cluster.json"

// identity is the content of identityFile.
type identity struct {
	// ClusterID is derived from the bootstrap voters; empty for a node that
	// was started without them (it joins an existing cluster).
	ClusterID string   `json:"cluster_id,omitempty"`
	NodeID    string   `json:"node_id"`
	Peers     []Server `json:"peers,omitempty"`
}

// ClusterID returns the identifier of a cluster bootstrapped with peers: a
// hash of the sorted "id=raftaddr" pairs, so every node given the same
// --peers computes the same id.
func ClusterID(peers []Server) string {
	parts := make([]string, len(peers))
	for i, p := range peers {
		parts[i] = p.ID + "=" + p.RaftAddr
	}
	slices.Sort(parts)
	sum := sha256.Sum256([]byte(strings.Join(parts, ",")))
	return "c-" + hex.EncodeToString(sum[:6])
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
		return nil, fmt.Errorf("%w: %s in %s is not valid JSON (%v); restore it or use an empty --data-dir", ErrForeignDataDir, identityFile, dir, err)
	}
	return &id, nil
}

// writeIdentity writes the identity file atomically (temp file, fsync, rename).
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
	return nil
}

// checkIdentity verifies that the data directory, if it already names a node,
// belongs to this node and to the cluster described by cfg.Bootstrap.
func checkIdentity(cfg *Config, id *identity) error {
	if id == nil {
		return nil
	}
	if id.NodeID != cfg.ID {
		return fmt.Errorf("%w: data dir %s belongs to node %q, not %q; start node %q with it or give %q an empty --data-dir",
			ErrForeignDataDir, cfg.DataDir, id.NodeID, cfg.ID, id.NodeID, cfg.ID)
	}
	if len(cfg.Bootstrap) > 0 && id.ClusterID != "" {
		if want := ClusterID(cfg.Bootstrap); want != id.ClusterID {
			return fmt.Errorf("%w: data dir %s holds cluster %s but --peers describes cluster %s; pass the original --peers (or none) to resume, or use an empty --data-dir for a new cluster",
				ErrForeignDataDir, cfg.DataDir, id.ClusterID, want)
		}
	}
	return nil
}
