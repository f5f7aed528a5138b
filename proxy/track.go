package proxy

import (
	"hash/maphash"
	"sync"
	"time"
)

// The request tracker follows which client requests the server has yet to
// answer, from the message types alone, the way PostgreSQL's own loop
// processes them. It serves three things and changes no byte of the stream:
//
//   - a graceful shutdown closes a session only when the server has
//     answered everything the client sent and no transaction is open,
//   - the idle-in-transaction limit times a session only while the server
//     owes its client nothing (idle, or waiting on the client: see
//     clientwait.go), never while the server works on a request, and
//   - the fences-accepted metric tells an Execute of a prepared fence call
//     from any other Execute.
//
// The frontend pump pushes one entry per message that gets an answer
// (Parse, Bind, Close, Describe, Execute, Sync, Query, FunctionCall) and
// per CopyDone and CopyFail, before it forwards the message; the backend
// pump pops entries as the answers arrive. Three places where PostgreSQL
// departs from "one answer per message" are modelled:
//
//   - after an error in an extended-protocol message the server discards
//     every message up to the next Sync (Query and FunctionCall included);
//   - in COPY FROM STDIN the server ignores Sync and Flush until CopyDone
//     or CopyFail (libpq sends a Sync with the Execute of a COPY and
//     another after CopyDone: one ReadyForQuery answers both);
//   - CopyData, CopyDone and CopyFail outside a COPY are dropped.
//
// One case cannot be decided at once, by the proxy or by the client: when
// a COPY FROM STDIN fails, each Sync the client sent during the COPY was
// either ignored (the server read it in COPY mode) or answered (it read it
// after the error). The tracker then assumes they all wait for an answer:
// it counts requests too many, never too few, so the session is never
// closed with a request in flight. The server's next answer to anything
// else settles it (Syncs still at the front by then were ignored); until
// the client sends more, a shutdown waits for the drain deadline instead
// of closing the session at once. Any answer the model does not expect
// marks the session lost, with the same conservative effect.

// maxTracked bounds a session's tracked requests: a client that has sent
// this many without the server answering them is pushed back (the frontend
// pump reads nothing more from it until answers arrive, see waitRoom), so
// the tracker never has to give up on a session for its size, and the
// session stays timed (Config.IdleInTransactionTimeout).
const maxTracked = 1 << 18

// pushResult is what push decided about a frontend message.
type pushResult int

const (
	pushed     pushResult = iota // forward it
	pushedFull                   // forward it, then wait for room (waitRoom)
	refused                      // the session is closing: do not forward it
)

// request is one tracked frontend message.
type request struct {
	typ  byte   // 'P', 'B', 'C', 'D', 'E', 'S', 'Q', 'F', 'c' or 'f'
	sub  byte   // Close and Describe: 'S' (statement) or 'P' (portal)
	n    uint32 // Sync: consecutive Syncs folded into this entry
	name uint64 // hash of the statement (Parse, Describe 'S', Close 'S') or portal name
	stmt uint64 // Bind: hash of the statement name
	at   int64  // Query, Execute: when forwarded (ns since the session began)
}

// extended reports whether typ is an extended-query message other than
// Sync: after an error in one, the server skips to the next Sync.
func extended(typ byte) bool {
	switch typ {
	case 'P', 'B', 'C', 'D', 'E':
		return true
	}
	return false
}

var nameSeed = maphash.MakeSeed()

// nameHash identifies a statement or portal name; the unnamed one is 0.
func nameHash(b []byte) uint64 {
	if len(b) == 0 {
		return 0
	}
	return maphash.Bytes(nameSeed, b)
}

// tracker is a session's request tracker. Both pumps and the drain use it,
// under mu.
type tracker struct {
	mu      sync.Mutex
	queue   []request
	head    int
	base    time.Time // origin of request.at
	pending int       // Sync, Query and FunctionCall entries not yet answered

	// Frontend side.
	unsynced int  // extended messages pushed since the last Sync, Query or FunctionCall
	closing  bool // the drain closed the session: forward nothing more
	// room wakes a frontend pump waiting for the queue to shrink below
	// maxTracked (waiting says one is), or for the session to end (ended).
	room    *sync.Cond
	waiting bool
	ended   bool

	// stallLimit is Config.IdleInTransactionTimeout (0: off); readyAt is
	// when the last ReadyForQuery came (by now), kept only with a limit.
	stallLimit time.Duration
	readyAt    int64
	// Waiting on the client (see clientwait.go): io counts the pumps'
	// client reads and writes (nil without a limit); receiving, that the
	// frontend pump streams a message it pushed; watchRead/watchWrite, the
	// read or write in progress at an earlier check (0: none) and since
	// when; stalledOnClient, what closed the session.
	io                        *clientIO
	receiving                 bool
	watchRead, watchWrite     uint64
	watchReadAt, watchWriteAt int64
	stalledOnClient           string

	// Backend side.
	status   byte // last ReadyForQuery status
	skipping bool // an extended-protocol error: the server skips to the next Sync
	copyIn   bool // the server is in COPY FROM STDIN
	// ignorable counts Syncs sent during a COPY that failed, which the
	// server may have ignored: see settle.
	ignorable int
	lost      bool // an answer the model did not expect
	// sentAt is when the frontend pump last forwarded a message of a lost
	// session (by now), kept only with a stall limit: see closeIfStalled.
	sentAt int64
	// qFence: the current statement of a simple Query returns a fence
	// result (its RowDescription matched).
	qFence bool
	// Statements and portals known to return a fence result.
	stmtFence, portalFence map[uint64]struct{}
}

func (t *tracker) init(status byte) {
	t.room = sync.NewCond(&t.mu)
	t.base = time.Now()
	t.status = status
	t.stmtFence = map[uint64]struct{}{}
	t.portalFence = map[uint64]struct{}{}
}

// now returns the time for request.at.
func (t *tracker) now() int64 { return int64(time.Since(t.base)) }

// push records a frontend message about to be forwarded. It returns
// refused when the session is closing and the message must not be
// forwarded, and pushedFull when the tracker now holds maxTracked
// requests: the frontend pump forwards the message, then waits for room
// (waitRoom) before it reads another.
func (t *tracker) push(r request) pushResult {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.pushLocked(r)
}

// pushLocked is push with mu held: the frontend pump records a whole batch
// of messages under one lock (see frontendBatch).
func (t *tracker) pushLocked(r request) pushResult {
	if t.closing {
		return refused
	}
	if t.lost {
		if t.stallLimit > 0 {
			t.sentAt = t.now()
		}
		return pushed
	}
	switch r.typ {
	case 'S', 'Q', 'F':
		t.unsynced = 0
		t.pending++
		if r.typ == 'S' && len(t.queue) > t.head && t.queue[len(t.queue)-1].typ == 'S' {
			t.queue[len(t.queue)-1].n++
			return pushed
		}
		r.n = 1
	case 'c', 'f':
	default:
		t.unsynced++
	}
	if t.head > 0 && t.head == len(t.queue) {
		t.queue, t.head = t.queue[:0], 0
	} else if t.head >= 1024 && t.head*2 >= len(t.queue) {
		n := copy(t.queue, t.queue[t.head:])
		t.queue, t.head = t.queue[:n], 0
	}
	t.queue = append(t.queue, r)
	if len(t.queue)-t.head >= maxTracked {
		return pushedFull
	}
	return pushed
}

// waitRoom blocks until the tracker holds fewer than maxTracked requests,
// the session ends, or the tracker gave up on it. The frontend pump calls
// it after push said pushedFull, having flushed what it forwarded (the
// server must see the requests to answer them). It reports false when the
// session ended meanwhile.
func (t *tracker) waitRoom() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.room == nil {
		t.room = sync.NewCond(&t.mu)
	}
	for len(t.queue)-t.head >= maxTracked && !t.lost && !t.ended && !t.closing {
		t.waiting = true
		t.room.Wait()
	}
	t.waiting = false
	return !t.ended && !t.closing
}

// wake lets a frontend pump waiting in waitRoom look again. Call with mu
// held, after popping requests.
func (t *tracker) wake() {
	if t.waiting {
		t.room.Broadcast()
	}
}

// end marks the session ended, waking a frontend pump waiting for room.
func (t *tracker) end() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.ended = true
	if t.room != nil {
		t.room.Broadcast()
	}
}

// loseTrack gives up tracking the session: it is then never idle, and its
// fences are no longer counted.
func (t *tracker) loseTrack() {
	t.lost = true
	t.wake()
	t.queue, t.head = nil, 0
	t.stmtFence, t.portalFence = nil, nil
}

// idle reports whether the server has answered every request, no COPY or
// extended batch is under way and no transaction is open. Call with mu held.
func (t *tracker) idle() bool {
	return !t.lost && t.status == 'I' && t.pending == 0 && t.unsynced == 0 && !t.skipping && !t.copyIn
}

// closeIfIdle marks the session closing when it is idle, so that the
// frontend pump forwards nothing more, and reports whether it did.
func (t *tracker) closeIfIdle() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closing || !t.idle() {
		return false
	}
	t.closing = true
	return true
}

// quiet reports whether nothing the proxy forwarded is still unanswered:
// no request, extended batch or COPY in flight, and the answers followed.
// Call with mu held.
func (t *tracker) quiet() bool {
	return !t.lost && t.pending == 0 && t.unsynced == 0 && !t.skipping && !t.copyIn
}

// closeOnLoss runs when the upstream connection is lost. It marks the
// session closing, so that nothing the client sends from now on is
// forwarded, and reports whether nothing forwarded was in flight: only then
// may the proxy tell the client anything. With a request in flight (a
// COMMIT among them, perhaps already committed) any error the proxy made up
// would read as the server's answer to it.
func (t *tracker) closeOnLoss() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.closing = true
	return t.quiet()
}

// closeIfStalled marks the session closing when it has been idle in a
// transaction (status 'T' or 'E', every request answered, no extended
// batch or COPY under way) for stallLimit since the last ReadyForQuery,
// and then calls closed with mu held, so that nothing the client sends
// after this decision is forwarded. In a transaction that is not idle so,
// it times the client instead (checkClient: the server waits on a client
// that sends nothing, or the client reads nothing). Otherwise it returns
// how long until it should look again, or 0 when no transaction is open
// (the next ReadyForQuery arms the check again). A session whose answers
// the tracker lost is held to a rule of its own, below.
func (t *tracker) closeIfStalled(closed func(lost bool)) time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.lost && !t.closing && (t.status == 'T' || t.status == 'E') {
		// The tracker cannot tell what is in flight. It closes the session
		// when the last ReadyForQuery said a transaction is open, came
		// after everything the client sent, and nothing came from either
		// side for the limit since: a stricter rule than for a tracked
		// session (a statement pipelined behind that ReadyForQuery and
		// running that long is ended too), and the close is bare.
		last := max(t.readyAt, t.sentAt)
		if t.sentAt > t.readyAt {
			return t.stallLimit // the client sent more: wait for its answer
		}
		if left := t.stallLimit - time.Duration(t.now()-last); left > 0 {
			return left
		}
		t.closing = true
		closed(true)
		return 0
	}
	if t.closing || t.lost || (t.status != 'T' && t.status != 'E') {
		return 0
	}
	if t.pending > 0 || t.unsynced > 0 || t.skipping || t.copyIn || t.receiving {
		if t.io == nil {
			return 0
		}
		return t.checkClient(t.io.reads.Load(), t.io.writes.Load(), closed)
	}
	t.watchRead, t.watchWrite = 0, 0
	if left := t.stallLimit - time.Duration(t.now()-t.readyAt); left > 0 {
		if t.io != nil {
			// Look again within a quarter of the limit: the client may
			// start waiting on in ways checkClient times meanwhile.
			return min(left, t.checkEvery())
		}
		return left
	}
	t.closing = true
	closed(false)
	return 0
}

// front returns the oldest unanswered request, dropping CopyData-family
// entries the server ignored outside a COPY. ok is false when none is left.
func (t *tracker) front() (r *request, ok bool) {
	for t.head < len(t.queue) {
		r = &t.queue[t.head]
		if !t.copyIn && (r.typ == 'c' || r.typ == 'f') {
			t.head++
			continue
		}
		return r, true
	}
	return nil, false
}

func (t *tracker) pop() { t.head++ }

// settle runs before an answer to anything but a Sync: Syncs still at the
// front of the queue, sent during a COPY that failed, were ignored by the
// server (it answers in order, and has moved past them).
func (t *tracker) settle() {
	for t.ignorable > 0 {
		r, ok := t.front()
		if !ok || r.typ != 'S' {
			break
		}
		t.ignorable--
		t.pending--
		if r.n--; r.n == 0 {
			t.pop()
		}
	}
	t.ignorable = 0
}

// popExtended pops the front request, which must be of type typ; anything
// else means the model is off, and the session is no longer tracked.
func (t *tracker) popExtended(typ byte) (request, bool) {
	r, ok := t.front()
	if !ok || r.typ != typ {
		t.loseTrack()
		return request{}, false
	}
	t.pop()
	return *r, true
}

// popSync pops one Sync, Query or FunctionCall: the request a
// ReadyForQuery answers.
func (t *tracker) popSync() bool {
	r, ok := t.front()
	if !ok {
		return false
	}
	switch r.typ {
	case 'S':
		r.n--
		if r.n == 0 {
			t.pop()
		}
	case 'Q', 'F':
		t.pop()
	default:
		return false
	}
	t.pending--
	return true
}

// answer is what the backend pump learns from one tracked answer.
type answer struct {
	fences  int           // fence calls accepted
	latency time.Duration // since the fence call was forwarded, when fences > 0
}

// ready handles a ReadyForQuery with status st. It reports whether the
// session is now to be closed because the proxy is draining.
func (t *tracker) ready(st byte, draining bool) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	defer t.wake()
	return t.readyLocked(st, draining)
}

// readyLocked is ready with mu held, for a batch of answers (see backendBatch);
// the caller wakes a waiting frontend pump (wake) before it unlocks.
func (t *tracker) readyLocked(st byte, draining bool) bool {
	t.status = st
	if t.stallLimit > 0 {
		t.readyAt = t.now()
	}
	t.qFence = false
	if t.lost {
		return false
	}
	if t.skipping {
		// The server discarded everything up to and including this Sync.
		t.skipping = false
		for {
			r, ok := t.front()
			if !ok {
				t.loseTrack()
				return false
			}
			if r.typ == 'S' {
				break
			}
			if r.typ == 'Q' || r.typ == 'F' {
				t.pending--
			}
			t.pop()
		}
	}
	if !t.popSync() {
		t.loseTrack()
		return false
	}
	if draining && !t.closing && t.idle() {
		t.closing = true
		return true
	}
	return false
}

// response handles an answer that completes (or, for 't', begins) the
// answer to one extended-protocol message or ends a COPY: '1', '2', '3',
// 't', 'n', 'I', 's', 'G', 'W'.
func (t *tracker) response(typ byte) {
	t.mu.Lock()
	defer t.mu.Unlock()
	defer t.wake()
	t.responseLocked(typ)
}

// responseLocked is response with mu held, for a batch of answers (see backendBatch);
// the caller wakes a waiting frontend pump (wake) before it unlocks.
func (t *tracker) responseLocked(typ byte) {
	if t.lost {
		return
	}
	t.settle()
	switch typ {
	case '1':
		if r, ok := t.popExtended('P'); ok {
			delete(t.stmtFence, r.name)
		}
	case '2':
		if r, ok := t.popExtended('B'); ok {
			if _, fence := t.stmtFence[r.stmt]; fence {
				t.portalFence[r.name] = struct{}{}
			} else {
				delete(t.portalFence, r.name)
			}
		}
	case '3':
		if r, ok := t.popExtended('C'); ok {
			if r.sub == 'S' {
				delete(t.stmtFence, r.name)
			} else {
				delete(t.portalFence, r.name)
			}
		}
	case 't':
		// ParameterDescription: the RowDescription or NoData that follows
		// completes the Describe.
	case 'n':
		if r, ok := t.popExtended('D'); ok {
			t.forget(r)
		}
	case 'I', 's':
		if r, ok := t.front(); ok && r.typ == 'E' {
			t.pop()
		} else if !ok || r.typ != 'Q' {
			t.loseTrack()
		}
	case 'G':
		t.copyIn = true
	case 'W':
		// COPY BOTH (replication): not modelled.
		t.loseTrack()
	}
}

// forget drops what a Describe said about its statement or portal.
func (t *tracker) forget(r request) {
	if r.sub == 'S' {
		delete(t.stmtFence, r.name)
	} else {
		delete(t.portalFence, r.name)
	}
}

// rowDescription handles a RowDescription; fence says whether it
// describes a single fence result column (see isFenceRow).
func (t *tracker) rowDescription(fence bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	defer t.wake()
	t.rowDescriptionLocked(fence)
}

// rowDescriptionLocked is rowDescription with mu held, for a batch of answers (see backendBatch);
// the caller wakes a waiting frontend pump (wake) before it unlocks.
func (t *tracker) rowDescriptionLocked(fence bool) {
	if t.lost {
		return
	}
	t.settle()
	r, ok := t.front()
	switch {
	case ok && r.typ == 'D':
		t.pop()
		if !fence {
			t.forget(*r)
		} else if r.sub == 'S' {
			t.stmtFence[r.name] = struct{}{}
		} else {
			t.portalFence[r.name] = struct{}{}
		}
	case ok && r.typ == 'Q':
		t.qFence = fence
	default:
		t.loseTrack()
	}
}

// commandComplete handles a CommandComplete whose body (the tag) is tag.
func (t *tracker) commandComplete(tag []byte) answer {
	t.mu.Lock()
	defer t.mu.Unlock()
	defer t.wake()
	return t.commandCompleteLocked(tag)
}

// commandCompleteLocked is commandComplete with mu held, for a batch of answers (see backendBatch);
// the caller wakes a waiting frontend pump (wake) before it unlocks.
func (t *tracker) commandCompleteLocked(tag []byte) answer {
	if t.lost {
		return answer{}
	}
	t.settle()
	if t.copyIn {
		t.endCopy()
		if t.lost {
			return answer{}
		}
	}
	r, ok := t.front()
	switch {
	case ok && r.typ == 'E':
		t.pop()
		if _, fence := t.portalFence[r.name]; fence {
			return fenceAnswer(tag, t.now()-r.at)
		}
	case ok && r.typ == 'Q':
		if t.qFence {
			t.qFence = false
			return fenceAnswer(tag, t.now()-r.at)
		}
	default:
		t.loseTrack()
	}
	return answer{}
}

// fenceAnswer counts the rows of a fence call's CommandComplete tag
// ("SELECT n"): each row is one accepted fence.
func fenceAnswer(tag []byte, since int64) answer {
	n := selectRows(tag)
	if n == 0 {
		return answer{}
	}
	return answer{fences: n, latency: time.Duration(since)}
}

// selectRows returns n for the tag "SELECT n", else 0.
func selectRows(tag []byte) int {
	const p = "SELECT "
	if len(tag) <= len(p) || string(tag[:len(p)]) != p {
		return 0
	}
	n := 0
	for _, c := range tag[len(p):] {
		if c == 0 {
			break
		}
		if c < '0' || c > '9' || n > 1<<40 {
			return 0
		}
		n = n*10 + int(c-'0')
	}
	return n
}

// isFenceRow reports whether a RowDescription body describes exactly one
// computed column of type bigint named "fence" or "fence_many": the result
// of fencegate.FenceSQL or fencegate.FenceManySQL.
func isFenceRow(body []byte) bool {
	var name string
	switch len(body) {
	case 26:
		name = "fence"
	case 31:
		name = "fence_many"
	default:
		return false
	}
	// One field, its name, table OID 0, attribute number 0, type OID 20 (int8).
	i := 2 + len(name) + 1
	return string(body[:2]) == "\x00\x01" && string(body[2:i-1]) == name && body[i-1] == 0 &&
		string(body[i:i+10]) == "\x00\x00\x00\x00\x00\x00\x00\x00\x00\x14"
}

// endCopy handles the successful end of a COPY FROM STDIN: the server read
// a CopyDone, ignoring every Sync since the message that began the COPY.
func (t *tracker) endCopy() {
	t.copyIn = false
	start, ok := t.front()
	if !ok || (start.typ != 'E' && start.typ != 'Q') {
		t.loseTrack()
		return
	}
	i := t.head + 1
	for ; i < len(t.queue) && t.queue[i].typ == 'S'; i++ {
		t.pending -= int(t.queue[i].n)
	}
	if i == len(t.queue) || t.queue[i].typ != 'c' {
		t.loseTrack()
		return
	}
	// Drop the ignored Syncs and the CopyDone, keeping the COPY's request.
	t.queue = append(t.queue[:t.head+1], t.queue[i+1:]...)
}

// errorResponse handles an ErrorResponse.
func (t *tracker) errorResponse() {
	t.mu.Lock()
	defer t.mu.Unlock()
	defer t.wake()
	if t.lost {
		return
	}
	t.qFence = false
	if t.copyIn {
		// An error ends the COPY. The Syncs sent since it began, up to the
		// CopyDone or CopyFail, may have been read in COPY mode.
		t.copyIn = false
		r, ok := t.front()
		if !ok || (r.typ != 'E' && r.typ != 'Q') {
			t.loseTrack()
			return
		}
		for i := t.head + 1; i < len(t.queue) && t.queue[i].typ == 'S'; i++ {
			t.ignorable += int(t.queue[i].n)
		}
	} else {
		t.settle()
	}
	if r, ok := t.front(); ok && extended(r.typ) {
		// The server now discards everything up to the next Sync. (An
		// error with nothing outstanding is a FATAL from the server.)
		t.skipping = true
	}
}
