package demo

import (
	"github.com/fencegate/fencegate/cmd/internal/worker"
)

// Events a client process reports to the demo on its stdout, as
// worker.Events (the Kind is one of these). The demo answers on the
// client's stdin.
const (
	evAcquired = "acquired" // Token, TTLMillis
	evRead     = "read"     // State
	evChecked  = "checked"  // Held: the client's last look at its lease before writing
	evWrote    = "wrote"    // OK, SQLState, Err
	evReleased = "released"
	evSkipped  = "skipped" // the order was already paid; nothing to write
	evFailed   = "failed"  // Err

	cmdWrite = "write" // sent on stdin: go ahead and write
)

// eventWriter sends a client's events.
type eventWriter struct{ w *worker.Writer }

func (w eventWriter) send(e worker.Event) { _ = w.w.Send(e) }
