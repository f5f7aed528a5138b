package lockclient

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/fencegate/fencegate/tokenapi"
	"github.com/redis/go-redis/v9"
)

// countHook counts the commands a go-redis client sends.
type countHook struct{ n atomic.Int64 }

func (h *countHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *countHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmd)
	}
}
func (h *countHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.n.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

// The shared resource-name table (tokenapi/testdata/resource-names.json),
// run through Acquire and TryAcquire of a client without a token source (an
// efficiency lock, which never asks the token service) and with one: a
// refused name fails with tokenapi.ErrBadRequest before any command reaches
// Redis and leaves no key; a valid name is granted. Before, without a token
// source, "", NUL, invalid UTF-8 and 1025-byte names were granted.
func TestResourceNameTable(t *testing.T) {
	raw, err := os.ReadFile("../tokenapi/testdata/resource-names.json")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Cases []struct {
			Hex   string
			Valid bool
			Why   string
		}
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	tr := sharedRedis(t)
	hook := &countHook{}
	rc := redis.NewClient(&redis.Options{Addr: tr.addr, MaxRetries: -1, ContextTimeoutEnabled: true, DisableIdentity: true})
	rc.AddHook(hook)
	t.Cleanup(func() { rc.Close() })
	// A token source that must never be asked for a refused name.
	var asked atomic.Int64
	tokens := tokenFunc(func(ctx context.Context, resource string) (int64, error) {
		asked.Add(1)
		return time.Now().UnixNano(), nil
	})
	valid, refused := 0, 0
	for _, withTokens := range []bool{false, true} {
		var src TokenSource
		if withTokens {
			src = tokens
		}
		c, err := New([]redis.UniversalClient{rc}, src, WithKeyPrefix(tr.prefix), WithLogger(testutil.Logger(t)))
		if err != nil {
			t.Fatal(err)
		}
		for _, tc := range doc.Cases {
			b, err := hex.DecodeString(tc.Hex)
			if err != nil {
				t.Fatal(err)
			}
			name := string(b)
			for _, try := range []func(context.Context, string) (*Lock, error){c.Acquire, c.TryAcquire} {
				before, askedBefore := hook.n.Load(), asked.Load()
				l, err := try(ctxT(t), name)
				switch {
				case tc.Valid && err != nil:
					t.Errorf("%s (%.40q, tokens %v): %v; the table takes it", tc.Why, name, withTokens, err)
				case tc.Valid:
					if err := l.Release(ctxT(t)); err != nil {
						t.Errorf("release %q: %v", name, err)
					}
					valid++
				case err == nil:
					l.Release(ctxT(t))
					t.Errorf("%s (%.40q, tokens %v): granted; the table refuses it", tc.Why, name, withTokens)
				case !errors.Is(err, tokenapi.ErrBadRequest):
					t.Errorf("%s (%.40q, tokens %v): %v; want tokenapi.ErrBadRequest", tc.Why, name, withTokens, err)
				default:
					if n := hook.n.Load() - before; n != 0 {
						t.Errorf("%s: %d Redis commands sent for a refused name", tc.Why, n)
					}
					if asked.Load() != askedBefore {
						t.Errorf("%s: the token source was asked for a refused name", tc.Why)
					}
					if v := tr.values(t, name); v[0] != "" {
						t.Errorf("%s: key left in Redis: %q", tc.Why, v)
					}
					refused++
				}
			}
		}
	}
	t.Logf("%d cases: %d valid and %d refused calls, each as the table says", len(doc.Cases), valid, refused)
}

type tokenFunc func(ctx context.Context, resource string) (int64, error)

func (f tokenFunc) NextToken(ctx context.Context, resource string) (int64, error) {
	return f(ctx, resource)
}
