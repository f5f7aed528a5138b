package raftstore

import (
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/fencegate/fencegate/tokenapi"
	"go.etcd.io/bbolt"
)

// compactingNode opens node n1 on a one-node cluster (a new one when
// addr is "") that keeps only two entries after a snapshot, so that a
// snapshot compacts the log.
func compactingNode(t *testing.T, dir, addr string) (*Store, error) {
	t.Helper()
	cfg := fastConfig(t, "n1", dir)
	cfg.Layer = bindLayer(t, addr, nil)
	cfg.TrailingLogs = 2
	cfg.SnapshotInterval = time.Hour // only the snapshots the test takes
	if addr == "" {
		cfg.Peers = []tokenapi.Peer{{ID: "n1", RaftAddr: cfg.Layer.Addr().String(), APIAddr: cfg.APIAddr}}
	}
	return Open(cfg)
}

// usedNode runs a new one-node cluster in dir until its cluster id is
// recorded, allocates 10 tokens in as many entries, takes a snapshot
// (which compacts the log), allocates 3 more and stops; it returns the
// node's Raft address.
func usedNode(t *testing.T, dir string) string {
	t.Helper()
	s, err := compactingNode(t, dir, "")
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	testutil.Eventually(t, 10*time.Second, "n1 to lead", s.IsLeader)
	testutil.Eventually(t, 10*time.Second, "the cluster id recorded", func() bool {
		id, _ := readIdentity(dir)
		return id != nil && id.ClusterID != ""
	})
	ctx := context.Background()
	for range 10 {
		if _, err := s.Allocate(ctx, 1); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Snapshot(); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := s.Allocate(ctx, 1); err != nil {
			t.Fatal(err)
		}
	}
	addr := s.RaftAddr()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return addr
}

// reopenRefused reopens n1 on dir and wants it refused as lost.
func reopenRefused(t *testing.T, dir, addr string, wants ...string) error {
	t.Helper()
	s, err := compactingNode(t, dir, addr)
	if err == nil {
		s.Kill()
		t.Fatalf("n1 started from a data dir that lost part of its state")
	}
	if !errors.Is(err, ErrDataDirLost) {
		t.Fatalf("Open = %v, want ErrDataDirLost", err)
	}
	for _, w := range wants {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("refusal %q does not say %q", err, w)
		}
	}
	t.Log(err)
	return err
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// raft.db deleted, snapshots kept: the node used to resume from the
// snapshot at term 0, a voter that had forgotten its votes and every entry
// after the snapshot.
func TestLostRaftDBWithSnapshotsRefused(t *testing.T) {
	dir := t.TempDir()
	addr := usedNode(t, dir)
	if err := os.Remove(filepath.Join(dir, "raft.db")); err != nil {
		t.Fatal(err)
	}
	reopenRefused(t, dir, addr, "raft.db", "gone or empty", "snapshots up to index", "replace the node")
	// Refused again: the failed start left nothing that makes it look whole.
	reopenRefused(t, dir, addr, "gone or empty")
}

// Snapshots deleted while the log starts after index 1: the entries
// before it are nowhere.
func TestLostSnapshotsRefused(t *testing.T) {
	dir := t.TempDir()
	addr := usedNode(t, dir)
	if err := os.RemoveAll(filepath.Join(dir, "snapshots")); err != nil {
		t.Fatal(err)
	}
	reopenRefused(t, dir, addr, "no snapshot holds entries 1 to", "the snapshots are gone")
}

// A raft.db older than the snapshots (put back from a copy): its term is
// below the snapshot's.
func TestOldRaftDBRefused(t *testing.T) {
	dir := t.TempDir()
	s, err := compactingNode(t, dir, "")
	if err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "n1 to lead", s.IsLeader)
	addr := s.RaftAddr()
	s.Close()
	old := filepath.Join(t.TempDir(), "raft.db")
	copyFile(t, filepath.Join(dir, "raft.db"), old)
	// A new term (every restart of a one-node cluster elects again), and a
	// snapshot taken in it.
	s, err = compactingNode(t, dir, addr)
	if err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "n1 to lead", s.IsLeader)
	if _, err := s.Allocate(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
	if err := s.Snapshot(); err != nil {
		t.Fatal(err)
	}
	s.Close()
	copyFile(t, old, filepath.Join(dir, "raft.db"))
	reopenRefused(t, dir, addr, "older than its snapshots")
}

// A raft.db copied from a node of the same id in another cluster.
func TestForeignRaftDBRefused(t *testing.T) {
	dir, other := t.TempDir(), t.TempDir()
	addr := usedNode(t, dir)
	usedNode(t, other)
	copyFile(t, filepath.Join(other, "raft.db"), filepath.Join(dir, "raft.db"))
	err := reopenRefused(t, dir, addr, "copied from elsewhere")
	if !errors.Is(err, ErrForeignDataDir) {
		t.Fatalf("Open = %v, want it to wrap ErrForeignDataDir too", err)
	}
}

// Snapshots copied from another cluster into a directory whose raft.db is
// whole (a log from index 1) and younger: only the cluster id tells.
func TestForeignSnapshotsRefused(t *testing.T) {
	dir, other := t.TempDir(), t.TempDir()
	s, err := compactingNode(t, dir, "")
	if err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "the cluster id recorded", func() bool {
		id, _ := readIdentity(dir)
		return id != nil && id.ClusterID != ""
	})
	addr := s.RaftAddr()
	s.Close()
	usedNode(t, other)
	if err := os.RemoveAll(filepath.Join(dir, "snapshots")); err != nil {
		t.Fatal(err)
	}
	if err := os.CopyFS(filepath.Join(dir, "snapshots"), os.DirFS(filepath.Join(other, "snapshots"))); err != nil {
		t.Fatal(err)
	}
	err = reopenRefused(t, dir, addr, "holds the state of cluster")
	if !errors.Is(err, ErrForeignDataDir) {
		t.Fatalf("Open = %v, want it to wrap ErrForeignDataDir too", err)
	}
}

// cluster.json lost while raft.db survives: whose state raft.db holds is
// unknown to the directory, and the node is refused rather than given a
// new data directory id.
func TestLostClusterJSONRefused(t *testing.T) {
	dir := t.TempDir()
	addr := usedNode(t, dir)
	if err := os.Remove(filepath.Join(dir, identityFile)); err != nil {
		t.Fatal(err)
	}
	reopenRefused(t, dir, addr, "no cluster.json")
}

// raft.db records whose state it holds from the founding on, with the
// cluster id once known; a directory written before records existed gets
// one on its first start and resumes.
func TestRecordInRaftDB(t *testing.T) {
	dir := t.TempDir()
	s, err := compactingNode(t, dir, "")
	if err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "the cluster id in raft.db's record", func() bool {
		r, err := readRecord(s.bolt)
		return err == nil && r != nil && r.ClusterID != "" && r.ClusterID == s.fsm.clusterID()
	})
	id, _ := readIdentity(dir)
	if r, _ := readRecord(s.bolt); *r != recordOf(*id) {
		t.Fatalf("raft.db's record %+v, cluster.json %+v", *r, *id)
	}
	if _, err := s.Allocate(context.Background(), 4); err != nil {
		t.Fatal(err)
	}
	addr := s.RaftAddr()
	s.Close()

	// As an earlier version left it: no record.
	db, err := bbolt.Open(filepath.Join(dir, "raft.db"), 0o600, &bbolt.Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *bbolt.Tx) error { return tx.Bucket([]byte("conf")).Delete(recordKey) }); err != nil {
		t.Fatal(err)
	}
	db.Close()

	s, err = compactingNode(t, dir, addr)
	if err != nil {
		t.Fatalf("a data dir without a record did not resume: %v", err)
	}
	defer s.Close()
	testutil.Eventually(t, 10*time.Second, "log replayed", func() bool { return s.LastToken() == 4 })
	if r, err := readRecord(s.bolt); err != nil || r == nil || *r != recordOf(*id) {
		t.Fatalf("after the first start without a record, raft.db's record = %+v, %v; want %+v", r, err, recordOf(*id))
	}
}

// A raft.db cut short or overwritten (a disk that lost its tail, a copy
// interrupted) is refused with one line naming the file and what to do,
// never a panic of the storage library, and nothing is written to it.
func TestDamagedRaftDBRefused(t *testing.T) {
	for _, tc := range []struct {
		name   string
		damage func(t *testing.T, path string)
	}{
		{"truncated to half", func(t *testing.T, path string) {
			st, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.Truncate(path, st.Size()/2); err != nil {
				t.Fatal(err)
			}
		}},
		{"truncated to 100 bytes", func(t *testing.T, path string) {
			if err := os.Truncate(path, 100); err != nil {
				t.Fatal(err)
			}
		}},
		{"meta pages zeroed", func(t *testing.T, path string) {
			f, err := os.OpenFile(path, os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if _, err := f.WriteAt(make([]byte, 2*os.Getpagesize()), 0); err != nil {
				t.Fatal(err)
			}
		}},
		{"the root page zeroed", func(t *testing.T, path string) {
			f, err := os.OpenFile(path, os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			st, _ := f.Stat()
			m, err := readBoltMeta(f, st.Size())
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.WriteAt(make([]byte, m.pageSize), int64(m.root)*int64(m.pageSize)); err != nil {
				t.Fatal(err)
			}
		}},
		{"every page past the metas overwritten", func(t *testing.T, path string) {
			f, err := os.OpenFile(path, os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			st, _ := f.Stat()
			m, err := readBoltMeta(f, st.Size())
			if err != nil {
				t.Fatal(err)
			}
			junk := make([]byte, st.Size()-2*int64(m.pageSize))
			for i := range junk {
				junk[i] = byte(i * 7)
			}
			if _, err := f.WriteAt(junk, 2*int64(m.pageSize)); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			addr := usedNode(t, dir)
			path := filepath.Join(dir, "raft.db")
			tc.damage(t, path)
			before, _ := os.ReadFile(path)
			var err error
			func() {
				defer func() {
					if r := recover(); r != nil {
						t.Fatalf("Open panicked on a damaged raft.db: %v", r)
					}
				}()
				var s *Store
				s, err = compactingNode(t, dir, addr)
				if err == nil {
					s.Kill()
					t.Fatalf("n1 started from a damaged raft.db")
				}
			}()
			t.Logf("refused: %v", err)
			if !strings.Contains(err.Error(), "raft.db") {
				t.Errorf("refusal %q does not name raft.db", err)
			}
			if after, _ := os.ReadFile(path); string(after) != string(before) {
				t.Errorf("the damaged raft.db was written to")
			}
		})
	}
}

// checkBoltFile never panics on a raft.db with random bytes changed, and
// whatever it lets through bbolt opens (and rebuilds its free list from)
// without dying: a crash here kills the test binary.
func TestCheckBoltFileMutations(t *testing.T) {
	dir := t.TempDir()
	usedNode(t, dir)
	good, err := os.ReadFile(filepath.Join(dir, "raft.db"))
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(7, 11))
	path := filepath.Join(t.TempDir(), "raft.db")
	var refused, opened int
	for i := range 400 {
		b := slices.Clone(good)
		for range 1 + rng.IntN(8) {
			b[rng.IntN(len(b))] = byte(rng.Uint32())
		}
		if i%5 == 0 { // and sometimes cut the tail
			b = b[:rng.IntN(len(b))]
		}
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		if checkBoltFile(path) != nil {
			refused++
			continue
		}
		db, err := bbolt.Open(path, 0o600, &bbolt.Options{Timeout: time.Second, NoFreelistSync: true, FreelistType: bbolt.FreelistMapType})
		if err == nil {
			opened++
			db.Close()
		}
	}
	t.Logf("400 mutations: %d refused by the check, %d opened by bbolt", refused, opened)
}
