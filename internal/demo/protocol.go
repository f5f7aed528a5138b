package demo

import (
	"encoding/json"
	"io"
	"sync"
)

// Events a client process reports to the demo on its stdout, one JSON object
// per line. The demo answers on the client's stdin.
const (
	evAcquired = "acquired" // Token, TTLMillis
	evRead     = "read"     // State
	evChecked  = "checked"  // Held: the client's last look at its lease before writing
	evWrote    = "wrote"    // OK, SQLState, Error
	evReleased = "released"
	evSkipped  = "skipped" // the order was already paid; nothing to write
	evFailed   = "failed"  // Error

	cmdWrite = "write" // sent on stdin: go ahead and write
)

// event is one line a client reports.
type event struct {
	Event     string `json:"event"`
	Token     int64  `json:"token,omitempty"`
	TTLMillis int64  `json:"ttl_ms,omitempty"`
	State     string `json:"state,omitempty"`
	Held      bool   `json:"held,omitempty"`
	OK        bool   `json:"ok,omitempty"`
	SQLState  string `json:"sqlstate,omitempty"`
	Error     string `json:"error,omitempty"`
}

type eventWriter struct {
	mu  sync.Mutex
	enc *json.Encoder
}

func newEventWriter(w io.Writer) *eventWriter { return &eventWriter{enc: json.NewEncoder(w)} }

func (w *eventWriter) send(e event) {
	w.mu.Lock()
	defer w.mu.Unlock()
	_ = w.enc.Encode(e)
}
