package faults

import (
	"path/filepath"
	"testing"

	"github.com/fencegate/fencegate/cmd/internal/worker"
)

// syntheticRun is a history of n serial lock-write-release rounds by four
// clients, with its database state.
func syntheticRun(n int) ([]worker.Event, DBState) {
	var evs []worker.Event
	var db DBState
	t := int64(0)
	for i := range n {
		c := "c" + string(rune('1'+i%4))
		op := int64(i/4 + 1)
		tok := int64(i + 1)
		for _, k := range []string{KindTokenCall, KindTokenOK, KindAcquireOK, KindTxnCall, KindTxnOK, KindRelease} {
			t += 10
			evs = append(evs, worker.Event{Time: t, Client: c, Kind: k, Op: op, Token: tok, Value: int64(i), Resource: "counter"})
		}
		db.Rows = append(db.Rows, Row{Client: c, Op: op, Token: tok, Prev: int64(i)})
	}
	db.Counter = int64(n)
	return evs, db
}

func BenchmarkCheck(b *testing.B) {
	evs, db := syntheticRun(10000)
	b.ResetTimer()
	for b.Loop() {
		Check(evs, db)
	}
}

func BenchmarkCheckTokenOrder(b *testing.B) {
	evs, _ := syntheticRun(2000)
	html := filepath.Join(b.TempDir(), "tokens.html")
	b.ResetTimer()
	for b.Loop() {
		if ok, err := CheckTokenOrder(evs, html); err != nil || !ok {
			b.Fatalf("CheckTokenOrder() = %v, %v", ok, err)
		}
	}
}
