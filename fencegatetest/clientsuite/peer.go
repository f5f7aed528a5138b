package clientsuite

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/fencegate/fencegate/lockclient"
	"github.com/fencegate/fencegate/tokenclient"
	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
)

// peer is a Go lockclient a client's tests drive over HTTP, so that one
// test can have a Go process and a Python or Node.js process contend for
// one lock. Every
// request is a POST with a JSON body (peerRequest) and answers JSON.
type peer struct {
	url    string
	log    *slog.Logger
	s      *Stack
	tokens *tokenclient.Client
	shared *redis.Client // the shared Redis, for the critical-section probe

	mu      sync.Mutex
	clients map[clientKey]*lockclient.Client
	locks   map[string]*lockclient.Lock
}

type peerRequest struct {
	Resource string  `json:"resource"`
	Redlock  bool    `json:"redlock"`
	TTLMs    int     `json:"ttl_ms"`
	Prefix   *string `json:"prefix"` // nil: lockclient's default prefix
	Account  string  `json:"account"`
	Delta    int64   `json:"delta"`
	N        int     `json:"n"`
	Inside   string  `json:"inside"` // key on the shared Redis counting holders in the critical section
	Counter  string  `json:"counter"`
	Node     int     `json:"node"`
}

type clientKey struct {
	redlock bool
	ttl     time.Duration
	prefix  string
}

func startPeer(t *testing.T, s *Stack) *peer {
	t.Helper()
	p := &peer{
		log:     testutil.Logger(t).With("component", "go-peer"),
		s:       s,
		tokens:  s.cluster.Client(t),
		shared:  redis.NewClient(&redis.Options{Addr: s.redisAddr}),
		clients: map[clientKey]*lockclient.Client{},
		locks:   map[string]*lockclient.Lock{},
	}
	mux := http.NewServeMux()
	for path, h := range map[string]func(context.Context, peerRequest) (any, error){
		"/try":           p.try,
		"/acquire":       p.acquire,
		"/release":       p.release,
		"/write":         p.write,
		"/contend":       p.contend,
		"/cluster/state": p.clusterState,
		"/cluster/cut":   p.cut,
		"/cluster/heal":  p.heal,
	} {
		mux.HandleFunc("POST "+path, func(w http.ResponseWriter, r *http.Request) {
			var req peerRequest
			if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			ctx, cancel := context.WithTimeout(r.Context(), 60*time.Second)
			defer cancel()
			out, err := h(ctx, req)
			w.Header().Set("Content-Type", "application/json")
			if err != nil {
				w.WriteHeader(http.StatusConflict)
				out = map[string]any{"error": err.Error(), "not_acquired": errors.Is(err, lockclient.ErrNotAcquired),
					"stale": errors.Is(err, lockclient.ErrStaleToken)}
			}
			_ = json.NewEncoder(w).Encode(out)
		})
	}
	srv := httptest.NewServer(mux)
	p.url = srv.URL
	t.Cleanup(func() {
		srv.Close()
		p.mu.Lock()
		for _, l := range p.locks {
			_ = l.Release(context.Background())
		}
		for _, c := range p.clients {
			c.Close()
		}
		p.mu.Unlock()
		p.shared.Close()
	})
	return p
}

// client returns the lockclient for the request's mode, TTL and prefix.
func (p *peer) client(req peerRequest) (*lockclient.Client, error) {
	k := clientKey{redlock: req.Redlock, ttl: time.Duration(req.TTLMs) * time.Millisecond, prefix: "fencegate:lock:"}
	if k.ttl == 0 {
		k.ttl = 10 * time.Second
	}
	if req.Prefix != nil {
		k.prefix = *req.Prefix
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if c := p.clients[k]; c != nil {
		return c, nil
	}
	addrs := p.addrs(req.Redlock)
	c, err := lockclient.Dial(addrs, p.tokens, lockclient.WithTTL(k.ttl), lockclient.WithKeyPrefix(k.prefix),
		lockclient.WithNodeTimeout(time.Second), lockclient.WithRetry(lockclient.FixedRetry(5*time.Millisecond)),
		lockclient.WithLogger(p.log))
	if err != nil {
		return nil, err
	}
	p.clients[k] = c
	return c, nil
}

// addrs are the Redis nodes of a lock: the shared Redis, or the Redlock
// masters.
func (p *peer) addrs(redlock bool) []string {
	if !redlock {
		return []string{p.s.redisAddr}
	}
	var addrs []string
	for _, r := range p.s.redlock {
		addrs = append(addrs, r.Addr())
	}
	return addrs
}

type lockInfo struct {
	Token int64    `json:"token"`
	Key   string   `json:"key"`
	Value []string `json:"values"` // the key's value on every node ("" where absent)
}

func (p *peer) info(ctx context.Context, req peerRequest, l *lockclient.Lock) (lockInfo, error) {
	prefix := "fencegate:lock:"
	if req.Prefix != nil {
		prefix = *req.Prefix
	}
	key := prefix + req.Resource
	addrs := p.addrs(req.Redlock)
	info := lockInfo{Token: l.Token(), Key: key}
	for _, a := range addrs {
		rc := redis.NewClient(&redis.Options{Addr: a})
		v, err := rc.Get(ctx, key).Result()
		rc.Close()
		if err != nil && !errors.Is(err, redis.Nil) {
			return info, err
		}
		info.Value = append(info.Value, v)
	}
	return info, nil
}

func (p *peer) keep(resource string, l *lockclient.Lock) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.locks[resource] = l
}

// try: one attempt (TryAcquire); the lock is kept for /release and /write.
func (p *peer) try(ctx context.Context, req peerRequest) (any, error) {
	return p.take(ctx, req, (*lockclient.Client).TryAcquire)
}

// acquire: Acquire, retrying while another client holds the lock.
func (p *peer) acquire(ctx context.Context, req peerRequest) (any, error) {
	return p.take(ctx, req, (*lockclient.Client).Acquire)
}

// take takes the lock with how, keeps it, and answers its token and the
// key's value on every node.
func (p *peer) take(ctx context.Context, req peerRequest, how func(*lockclient.Client, context.Context, string) (*lockclient.Lock, error)) (any, error) {
	c, err := p.client(req)
	if err != nil {
		return nil, err
	}
	l, err := how(c, ctx, req.Resource)
	if err != nil {
		return nil, err
	}
	p.keep(req.Resource, l)
	return p.info(ctx, req, l)
}

func (p *peer) held(resource string) (*lockclient.Lock, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	l := p.locks[resource]
	if l == nil {
		return nil, fmt.Errorf("the Go peer holds no lock on %q", resource)
	}
	return l, nil
}

func (p *peer) release(ctx context.Context, req peerRequest) (any, error) {
	l, err := p.held(req.Resource)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	delete(p.locks, req.Resource)
	p.mu.Unlock()
	return map[string]bool{"released": true}, l.Release(ctx)
}

// write adds delta to an account's balance in a transaction fenced with the
// Go lock held on the request's resource.
func (p *peer) write(ctx context.Context, req peerRequest) (any, error) {
	l, err := p.held(req.Resource)
	if err != nil {
		return nil, err
	}
	db, err := pgx.Connect(ctx, p.s.app)
	if err != nil {
		return nil, err
	}
	defer db.Close(context.Background())
	err = l.InTx(ctx, db, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "UPDATE accounts SET balance = balance + $1 WHERE id = $2", req.Delta, req.Account)
		return err
	})
	return map[string]any{"token": l.Token()}, err
}

// contend runs N lock cycles on the resource: Acquire; INCR the Inside key
// on the shared Redis (it must be 1: nobody else inside); a fenced increment
// of the counter row; DECR; Release; a pause. It answers the tokens it got and how
// often it found someone else inside.
func (p *peer) contend(ctx context.Context, req peerRequest) (any, error) {
	c, err := p.client(req)
	if err != nil {
		return nil, err
	}
	db, err := pgx.Connect(ctx, p.s.app)
	if err != nil {
		return nil, err
	}
	defer db.Close(context.Background())
	var tokens []int64
	overlaps := 0
	for range req.N {
		l, err := c.Acquire(ctx, req.Resource)
		if err != nil {
			return nil, err
		}
		n, err := p.shared.Incr(ctx, req.Inside).Result()
		if err != nil {
			return nil, err
		}
		if n != 1 {
			overlaps++
		}
		err = l.InTx(ctx, db, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, "UPDATE counters SET n = n + 1 WHERE id = $1", req.Counter)
			return err
		})
		if err != nil {
			return nil, err
		}
		time.Sleep(time.Millisecond)
		if err := p.shared.Decr(ctx, req.Inside).Err(); err != nil {
			return nil, err
		}
		tokens = append(tokens, l.Token())
		if err := l.Release(ctx); err != nil {
			return nil, err
		}
		time.Sleep(5 * time.Millisecond) // work between holds, as the client's side does
	}
	return map[string]any{"tokens": tokens, "overlaps": overlaps}, nil
}

// clusterState answers each token node's state ("Leader", "Follower", ...)
// and API URL.
func (p *peer) clusterState(ctx context.Context, req peerRequest) (any, error) {
	type node struct {
		URL   string `json:"url"`
		State string `json:"state"`
	}
	var out []node
	for i := range p.s.cluster.Len() {
		n := node{URL: p.s.cluster.APIURL(i), State: "Down"}
		if srv := p.s.cluster.Node(i); srv != nil {
			n.State = srv.LocalStatus().State
		}
		out = append(out, n)
	}
	return out, nil
}

// cut partitions node i from the other nodes (its API stays reachable).
func (p *peer) cut(ctx context.Context, req peerRequest) (any, error) {
	p.s.cluster.Cut(req.Node)
	return map[string]bool{"cut": true}, nil
}

func (p *peer) heal(ctx context.Context, req peerRequest) (any, error) {
	p.s.cluster.Heal(req.Node)
	return map[string]bool{"healed": true}, nil
}
