package raftstore

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/testutil"
)

// TestStoreCheckpointsSurviveRestart: the checkpoints a node records from
// its entries' AppendedAt (through bbolt and a snapshot) are the same
// after it restarts and replays them, and Floor answers from them.
func TestStoreCheckpointsSurviveRestart(t *testing.T) {
	defer SetCheckpointIntervalForTest(40 * time.Millisecond)()
	dir := t.TempDir()
	s := singleNode(t, dir, "", true)
	addr := s.RaftAddr()
	ctx := context.Background()
	var firstAfter []time.Time // when each allocation was asked
	var tokens []int64
	for i := range 12 {
		firstAfter = append(firstAfter, time.Now())
		r, err := s.Allocate(ctx, 3)
		if err != nil {
			t.Fatal(err)
		}
		tokens = append(tokens, r.First)
		if i == 6 {
			if err := s.Snapshot(); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	cps := s.fsm.checkpoints()
	if len(cps) < 8 {
		t.Fatalf("%d checkpoints for 12 allocations 50ms apart", len(cps))
	}
	// Floor: never above a token asked for after the checkpoint's time.
	for _, age := range []time.Duration{0, 100 * time.Millisecond, 300 * time.Millisecond, time.Hour} {
		floor, at, err := s.Floor(age)
		if err != nil {
			t.Fatal(err)
		}
		if age == time.Hour {
			if floor != 0 || !at.IsZero() {
				t.Fatalf("Floor(1h) = %d at %v on a node a second old", floor, at)
			}
			continue
		}
		if time.Since(at) < age {
			t.Fatalf("Floor(%v) answered a checkpoint %v old", age, time.Since(at))
		}
		for i, asked := range firstAfter {
			if asked.After(at) && tokens[i] <= floor {
				t.Fatalf("Floor(%v) = %d at %v, but token %d was asked for at %v", age, floor, at, tokens[i], asked)
			}
		}
	}
	if _, _, err := s.Floor(-time.Second); err == nil {
		t.Fatal("Floor(-1s) succeeded")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = singleNode(t, dir, addr, false)
	defer s.Close()
	want := tokens[len(tokens)-1] + 2
	testutil.Eventually(t, 10*time.Second, "log replayed", func() bool { return s.LastToken() == want })
	if got := s.fsm.checkpoints(); !reflect.DeepEqual(got, cps) {
		t.Fatalf("after a restart the checkpoints are\n%v\nwant\n%v", got, cps)
	}
}
