package faults

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"sync"

	"github.com/fencegate/fencegate/cmd/internal/worker"
	"golang.org/x/sys/unix"
)

// Event kinds of the history. Client events come in call/return pairs with
// the same Client and Op; nemesis events bracket each fault.
const (
	KindAcquireCall = "acquire-call" // client asks for the lock
	KindAcquireOK   = "acquire-ok"   // lock granted with Token, validity in Detail
	KindAcquireFail = "acquire-fail" // no lock this time (Err)
	KindTokenCall   = "token-call"   // client asks the token service for a token
	KindTokenOK     = "token-ok"     // token service answered Token
	KindTokenFail   = "token-fail"   // no token (Err); it may or may not have been minted
	KindTxnCall     = "txn-call"     // fenced transaction with Token begins
	KindTxnOK       = "txn-ok"       // committed: read Value, wrote Value+1
	KindTxnStale    = "txn-stale"    // rejected by the fence (FG001): must leave no trace
	KindTxnFail     = "txn-fail"     // other failure; outcome unknown if Detail is "unknown"
	KindRelease     = "release"      // the client stops believing it holds the lock
	KindFaultStart  = "fault-start"  // nemesis begins Fault on Target
	KindFaultEnd    = "fault-end"    // nemesis heals Fault on Target
)

// Outcome details of a failed transaction.
const (
	// DetailUnknown marks a transaction that may have committed (the
	// connection broke at or after COMMIT).
	DetailUnknown = "unknown"
	// DetailAborted marks a transaction known not to have committed.
	DetailAborted = "aborted"
)

// MonoNow returns CLOCK_MONOTONIC in nanoseconds.
func MonoNow() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic("faults: clock_gettime(CLOCK_MONOTONIC): " + err.Error())
	}
	return ts.Nano()
}

// Recorder appends events to a JSON-lines writer; safe for concurrent use.
// Each event is written with one Write call, so a process killed mid-run
// leaves whole lines behind.
type Recorder struct {
	mu     sync.Mutex
	w      io.Writer
	events []worker.Event
	keep   bool
}

// NewRecorder writes events to w; when keep is true it also keeps them in
// memory (see Events).
func NewRecorder(w io.Writer, keep bool) *Recorder { return &Recorder{w: w, keep: keep} }

// Record stamps e with the current time when its Time is zero and writes it.
func (r *Recorder) Record(e worker.Event) error {
	if e.Time == 0 {
		e.Time = MonoNow()
	}
	b, err := worker.Encode(e)
	if err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.keep {
		r.events = append(r.events, e)
	}
	if _, err := r.w.Write(b); err != nil {
		return fmt.Errorf("write event: %w", err)
	}
	return nil
}

// Events returns the kept events sorted by time.
func (r *Recorder) Events() []worker.Event {
	r.mu.Lock()
	out := append([]worker.Event(nil), r.events...)
	r.mu.Unlock()
	SortEvents(out)
	return out
}

// SortEvents orders events by time, stably.
func SortEvents(evs []worker.Event) {
	sort.SliceStable(evs, func(i, j int) bool { return evs[i].Time < evs[j].Time })
}

// ReadHistory reads a JSON-lines history file, sorted by time. A torn last
// line (a writer killed mid-write) is ignored.
func ReadHistory(path string) ([]worker.Event, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open history: %w", err)
	}
	defer f.Close()
	var evs []worker.Event
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var e worker.Event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			continue
		}
		evs = append(evs, e)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read history: %w", err)
	}
	SortEvents(evs)
	return evs, nil
}
