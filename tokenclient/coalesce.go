package tokenclient

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fencegate/fencegate/tokenapi"
)

// Limits of one coalesced request: resources named and body bytes as
// encoded (the server reads at most 64 KiB and takes at most
// MaxBatchResources). A name counts by its JSON encoding, which can be six
// times its bytes ("<" is written \u003c, a control character \u0001).
const (
	coalesceMaxResources = 1024
	coalesceMaxBytes     = 48 << 10
)

// encodedSize is what resource adds to a batch body: its JSON string and a
// comma.
func encodedSize(resource string) int {
	if plainJSON(resource) {
		return len(resource) + 3
	}
	b, _ := json.Marshal(resource)
	return len(b) + 1
}

// pendingToken is one caller waiting in a node's coalescing queue.
type pendingToken struct {
	ctx      context.Context
	resource string
	size     int                // encodedSize(resource)
	res      chan pendingResult // buffered 1
	gone     atomic.Bool        // the caller stopped waiting
}

type pendingResult struct {
	tok    Token
	leader leaderHint
	err    error
}

// timers holds stopped attempt timers. Since Go 1.23 a timer that is
// stopped or reset delivers no value set before, so a reused timer never
// fires for an earlier attempt.
var timers sync.Pool

func getTimer(d time.Duration) *time.Timer {
	if t, ok := timers.Get().(*time.Timer); ok {
		t.Reset(d)
		return t
	}
	return time.NewTimer(d)
}

func putTimer(t *time.Timer) {
	t.Stop()
	timers.Put(t)
}

// tryCoalesced is one attempt of one caller against srv: it queues the
// caller and waits for the request that carries it. The caller is only ever
// put into a request that is sent after it was queued.
func (c *Client) tryCoalesced(ctx context.Context, srv, resource string) (Token, leaderHint, error) {
	// A name joins a batch only if the service takes it: one caller's bad
	// name must not fail the callers batched with it.
	if err := tokenapi.ValidateResource(resource); err != nil {
		return Token{}, leaderHint{}, err
	}
	p := &pendingToken{ctx: ctx, resource: resource, size: encodedSize(resource), res: make(chan pendingResult, 1)}
	c.queueMu.Lock()
	if c.ctx.Err() != nil {
		c.queueMu.Unlock()
		return Token{}, leaderHint{}, fmt.Errorf("%w: the client is closed", tokenapi.ErrUnavailable)
	}
	c.queued[srv] = append(c.queued[srv], p)
	start := !c.sending[srv]
	c.sending[srv] = true
	if start {
		c.senders.Add(1) // under queueMu, so that Close's Wait sees it
	}
	c.queueMu.Unlock()
	if start {
		if tok, leader, ok, err := c.sendInline(ctx, srv, p); ok {
			return tok, leader, err
		}
		go func() {
			defer c.senders.Done()
			c.sendQueued(srv)
		}()
	}
	// The attempt, queueing included, is bounded like any other. A caller
	// whose deadline comes first needs no timer of its own; otherwise the
	// timer is one used before (a new one per token cost an allocation
	// and its share of the client's CPU).
	var timeout <-chan time.Time
	if d, ok := ctx.Deadline(); !ok || time.Until(d) >= c.attemptTimeout {
		timer := getTimer(c.attemptTimeout)
		defer putTimer(timer)
		timeout = timer.C
	}
	select {
	case r := <-p.res:
		return r.tok, r.leader, r.err
	case <-ctx.Done():
		// A request that carries p may still mint a token; nobody sees it.
		p.gone.Store(true)
		return Token{}, leaderHint{}, fmt.Errorf("%w: %w", tokenapi.ErrUnavailable, ctx.Err())
	case <-timeout:
		p.gone.Store(true)
		return Token{}, leaderHint{}, fmt.Errorf("%w: no answer from %s within the attempt timeout %v", tokenapi.ErrUnavailable, srv, c.attemptTimeout)
	}
}

// sendInline sends p's request on the caller's goroutine when p is alone in
// srv's queue (always so at one caller), which saves starting a sender
// goroutine and handing the answer back. It runs as that sender: callers
// that queue meanwhile wait, and are sent by a sender goroutine started
// once p's request is answered, as they would be behind any request on the
// wire. The request ends with the caller's context, the attempt timeout or
// Close, like a call without coalescing. It reports false, having done
// nothing, when others are queued with p: then the sender goroutine serves
// p with them.
func (c *Client) sendInline(ctx context.Context, srv string, p *pendingToken) (Token, leaderHint, bool, error) {
	c.queueMu.Lock()
	if q := c.queued[srv]; len(q) != 1 || q[0] != p {
		c.queueMu.Unlock()
		return Token{}, leaderHint{}, false, nil
	}
	delete(c.queued, srv)
	c.queueMu.Unlock()

	rctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(c.ctx, cancel) // Close ends it, as it ends the sender's
	tok, leader, err := c.sendAlone(rctx, srv, p.resource)
	stop()
	cancel()

	c.queueMu.Lock()
	more := len(c.queued[srv]) > 0
	if !more {
		delete(c.sending, srv)
	}
	c.queueMu.Unlock()
	if more {
		go func() {
			defer c.senders.Done()
			c.sendQueued(srv)
		}()
	} else {
		c.senders.Done()
	}
	return tok, leader, true, err
}

// sendQueued sends srv's queue, one request at a time, until it is empty.
func (c *Client) sendQueued(srv string) {
	for {
		c.queueMu.Lock()
		q := c.queued[srv]
		var batch []*pendingToken
		size := 0
		i := 0
		for ; i < len(q) && len(batch) < coalesceMaxResources; i++ {
			p := q[i]
			if p.gone.Load() || p.ctx.Err() != nil {
				continue // its caller has given up
			}
			if len(batch) > 0 && size+p.size > coalesceMaxBytes {
				break
			}
			size += p.size
			batch = append(batch, p)
		}
		if i == len(q) {
			delete(c.queued, srv)
		} else {
			c.queued[srv] = q[i:]
		}
		if len(batch) == 0 && i == len(q) {
			delete(c.sending, srv)
			c.queueMu.Unlock()
			return
		}
		c.queueMu.Unlock()
		if len(batch) > 0 {
			c.sendBatch(srv, batch)
		}
	}
}

// sendBatch sends one request for batch to srv and hands each caller its
// token or the attempt's error.
func (c *Client) sendBatch(srv string, batch []*pendingToken) {
	// The request outlives any single caller; it is bounded by the attempt
	// timeout and by Close, and callers whose context ends stop waiting for
	// it.
	ctx := c.ctx
	if len(batch) == 1 {
		c.sendOne(ctx, srv, batch[0])
		return
	}
	size := 0
	for _, p := range batch {
		size += p.size
	}
	body := batchBody(batch, size)
	var resp tokenapi.BatchResponse
	leader, err := c.try(ctx, srv, http.MethodPost, "/v1/tokens", body, &resp)
	if err == nil && len(resp.Tokens) != len(batch) {
		err = fmt.Errorf("%w: asked for %d tokens, got %d", tokenapi.ErrInternal, len(batch), len(resp.Tokens))
	}
	if errors.Is(err, tokenapi.ErrBadRequest) {
		// Every name was checked before it joined, so the refusal is the
		// batch's (its size, a limit of the server's that the client does
		// not know), not any one caller's: each caller is asked for alone,
		// and a refusal of that request is its own.
		for _, p := range batch {
			if p.gone.Load() || p.ctx.Err() != nil {
				p.res <- pendingResult{err: fmt.Errorf("%w: the caller stopped waiting", tokenapi.ErrUnavailable)}
				continue
			}
			c.sendOne(ctx, srv, p)
		}
		return
	}
	for i, p := range batch {
		if err != nil {
			p.res <- pendingResult{err: err}
			continue
		}
		t := resp.Tokens[i]
		p.res <- pendingResult{
			tok:    Token{Resource: t.Resource, Value: t.Token, Proof: t.Proof, Term: resp.Term, Index: resp.Index, Leader: resp.Leader},
			leader: leader,
		}
	}
}

// sendOne sends the single-resource request for p and hands it the answer.
func (c *Client) sendOne(ctx context.Context, srv string, p *pendingToken) {
	tok, leader, err := c.sendAlone(ctx, srv, p.resource)
	p.res <- pendingResult{tok: tok, leader: leader, err: err}
}

// sendAlone sends the single-resource request for resource.
func (c *Client) sendAlone(ctx context.Context, srv, resource string) (Token, leaderHint, error) {
	body := singleBody(resource)
	var resp tokenapi.TokenResponse
	leader, err := c.try(ctx, srv, http.MethodPost, "/v1/tokens", body, &resp)
	return Token{Resource: resp.Resource, Value: resp.Token, Proof: resp.Proof, Term: resp.Term, Index: resp.Index, Leader: resp.Leader},
		leader, err
}
