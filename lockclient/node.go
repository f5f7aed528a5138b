package lockclient

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// The Lua scripts compare the key's value with the holder's random value
// before touching the key, so a holder never extends or deletes a lock that
// expired and now belongs to someone else.
var (
	releaseScript = redis.NewScript(`if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) else return 0 end`)
	extendScript  = redis.NewScript(`if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("pexpire", KEYS[1], ARGV[2]) else return 0 end`)
)

type opKind uint8

const (
	opAcquire opKind = iota // SET key value NX PX ttl
	opExtend                // compare-and-pexpire
	opRelease               // compare-and-delete
)

// op is one request to one node; its reply goes to out.
type op struct {
	kind     opKind
	key      string
	value    string
	ttl      time.Duration
	deadline time.Time
	node     int
	out      chan<- reply
}

// reply is a node's answer: ok means granted, extended or deleted; ok false
// with a nil err means the key was absent or held by another value.
type reply struct {
	node int
	ok   bool
	err  error
}

// node batches the requests that concurrent callers make to one Redis
// master into pipelines: while one batch is on the wire the next one
// accumulates, so at high concurrency one round trip (and one pair of
// syscalls on each side) serves many lock operations, and at low
// concurrency a request is sent at once. Batches run one after another, so
// a release queued after an acquire of the same key reaches the server
// after it.
type node struct {
	name    string
	rdb     redis.UniversalClient
	timeout time.Duration
	base    context.Context // carries the client's logger for go-redis's lines (redisLog)

	// spawn starts a flusher on a goroutine its client owns; false once
	// the client is closed, when the caller flushes itself.
	spawn func(func()) bool

	closed <-chan struct{} // the client's: closed by Close

	mu      sync.Mutex
	queue   []*op
	spare   []*op
	running bool

	lateMu      sync.Mutex
	late        map[lateKey]*lateEntry // releases to repeat until the node answered twice
	lateRunning bool
}

// submit queues o and makes sure a flusher is running; it does not wait.
func (n *node) submit(o *op) {
	n.mu.Lock()
	n.queue = append(n.queue, o)
	if n.running {
		n.mu.Unlock()
		return
	}
	n.running = true
	n.mu.Unlock()
	if !n.spawn(n.flushLoop) {
		n.flushLoop()
	}
}

// do queues o and, when no flusher is running, runs one batch (holding o)
// on the caller's goroutine, handing later requests to a new flusher. The
// reply goes to o.out as with submit. It saves a goroutine hand-off when a
// client has a single node.
func (n *node) do(o *op) {
	n.mu.Lock()
	n.queue = append(n.queue, o)
	if n.running {
		n.mu.Unlock()
		return
	}
	n.running = true
	batch := n.take()
	n.mu.Unlock()
	n.exec(batch)
	clear(batch)
	n.mu.Lock()
	n.spare = batch[:0]
	if len(n.queue) == 0 {
		n.running = false
		n.mu.Unlock()
		return
	}
	n.mu.Unlock()
	if !n.spawn(n.flushLoop) {
		n.flushLoop()
	}
}

// take returns the queued requests; n.mu is held.
func (n *node) take() []*op {
	batch := n.queue
	n.queue = n.spare
	n.spare = nil
	return batch
}

func (n *node) flushLoop() {
	for {
		n.mu.Lock()
		if len(n.queue) == 0 {
			n.running = false
			n.mu.Unlock()
			return
		}
		batch := n.take()
		n.mu.Unlock()
		n.exec(batch)
		clear(batch)
		n.mu.Lock()
		if n.spare == nil {
			n.spare = batch[:0]
		}
		n.mu.Unlock()
	}
}

// exec sends a batch as one pipeline and delivers every reply.
func (n *node) exec(batch []*op) {
	now := time.Now()
	live := batch[:0] // filtered in place: the batch belongs to this flusher
	for _, o := range batch {
		// An acquisition whose caller has stopped waiting would only leave
		// a key behind; releases and extensions are sent regardless.
		if o.kind == opAcquire && !now.Before(o.deadline) {
			o.out <- reply{node: o.node, err: context.DeadlineExceeded}
			continue
		}
		live = append(live, o)
	}
	if len(live) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(n.base, n.timeout)
	defer cancel()
	if len(live) == 1 {
		n.deliver(live[0], n.run(ctx, n.rdb, live[0]))
		return
	}
	pipe := n.rdb.Pipeline()
	cmds := make([]redis.Cmder, len(live))
	for i, o := range live {
		cmds[i] = n.queueCmd(ctx, pipe, o)
	}
	_, _ = pipe.Exec(ctx)
	var retry []*op
	for i, o := range live {
		if isNoScript(cmds[i].Err()) {
			retry = append(retry, o)
			continue
		}
		n.deliver(o, cmds[i])
	}
	// A master restarted since the scripts were first sent has forgotten
	// them: send the scripts' source, which loads them again.
	for _, o := range retry {
		n.deliver(o, n.evalSource(ctx, n.rdb, o))
	}
}

// run sends one request on its own.
func (n *node) run(ctx context.Context, c redis.Cmdable, o *op) redis.Cmder {
	switch o.kind {
	case opAcquire:
		return c.SetNX(ctx, o.key, o.value, o.ttl)
	default:
		cmd := c.EvalSha(ctx, n.script(o).Hash(), []string{o.key}, n.args(o)...)
		if isNoScript(cmd.Err()) {
			return n.evalSource(ctx, c, o)
		}
		return cmd
	}
}

func (n *node) queueCmd(ctx context.Context, pipe redis.Pipeliner, o *op) redis.Cmder {
	if o.kind == opAcquire {
		return pipe.SetNX(ctx, o.key, o.value, o.ttl)
	}
	return pipe.EvalSha(ctx, n.script(o).Hash(), []string{o.key}, n.args(o)...)
}

func (n *node) evalSource(ctx context.Context, c redis.Cmdable, o *op) redis.Cmder {
	return n.script(o).Eval(ctx, c, []string{o.key}, n.args(o)...)
}

func (n *node) script(o *op) *redis.Script {
	if o.kind == opExtend {
		return extendScript
	}
	return releaseScript
}

func (n *node) args(o *op) []any {
	if o.kind == opExtend {
		return []any{o.value, o.ttl.Milliseconds()}
	}
	return []any{o.value}
}

func (n *node) deliver(o *op, cmd redis.Cmder) {
	r := reply{node: o.node}
	switch c := cmd.(type) {
	case *redis.BoolCmd:
		r.ok, r.err = c.Result()
	case *redis.Cmd:
		v, err := c.Int64()
		r.ok, r.err = v == 1, err
	default:
		r.err = fmt.Errorf("%w %T", errBadReply, cmd)
	}
	o.out <- r
}

func isNoScript(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT")
}
