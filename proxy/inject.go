package proxy

import (
	"sync"
	"sync/atomic"
	"time"
)

// The proxy injects a few messages of its own into the client's stream (the
// SET TRANSACTION READ WRITE before a fence, the FG003 raise after a lone
// fence). Their answers must not reach the client. Both pumps count
// "response units" — one per frontend message that gets a completion
// message — within "batches" that end in ReadyForQuery. The frontend pump
// records which units of which batch are its own before it sends them; the
// backend pump swallows those units' messages. No bookkeeping happens while
// nothing is injected (the common case) beyond two counters.

type injKind uint8

const (
	injReadWrite injKind = iota // SET TRANSACTION READ WRITE before a fence
	injAlone                    // raise FG003: the batch held only a fence
	injFenceMark                // n == 0: unit at is the Execute of a fence
	injShowRW                   // SET TRANSACTION READ WRITE before SHOW transaction_read_only
)

// injection is one run of injected units in a batch.
type injection struct {
	batch  uint64
	simple bool // the batch is one simple Query: units are statements
	at, n  int  // injected units [at, at+n)
	kind   injKind
	start  time.Time // when sent, for the fence latency metric
}

type injections struct {
	mu      sync.Mutex
	list    []injection
	pending atomic.Int32
}

func (in *injections) add(i injection) {
	in.mu.Lock()
	in.list = append(in.list, i)
	in.pending.Store(int32(len(in.list)))
	in.mu.Unlock()
}

// lookup drops injections of batches before batch and reports the one
// covering (batch, unit), where the fence unit right after a read-write
// injection counts as covered (fence is then true). simple reports whether
// batch is a simple-Query batch.
func (in *injections) lookup(batch uint64, unit int) (inj injection, swallow, fence, simple bool) {
	in.mu.Lock()
	defer in.mu.Unlock()
	drop := 0
	for drop < len(in.list) && in.list[drop].batch < batch {
		drop++
	}
	if drop > 0 {
		in.list = append(in.list[:0], in.list[drop:]...)
		in.pending.Store(int32(len(in.list)))
	}
	for _, i := range in.list {
		if i.batch != batch {
			break
		}
		simple = simple || i.simple
		switch {
		case unit >= i.at && unit < i.at+i.n:
			return i, true, false, i.simple
		case i.kind == injFenceMark && unit == i.at:
			inj, fence = i, true
		case i.kind == injReadWrite && i.simple && unit == i.at+i.n:
			inj, fence = i, true
		}
	}
	return inj, false, fence, simple
}
