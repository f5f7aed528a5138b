// Package history records the operations clients perform against the token
// service and checks that they are linearizable, with a porcupine model and
// with a direct real-time check.
//
// The model: "next token for R" returns a token from one global counter. A
// history is linearizable iff the operations can be ordered, consistently
// with real time, so that tokens strictly increase; equivalently, all tokens
// are distinct and every token is greater than every token returned by an
// operation that completed before it started.
//
// Failed operations are recorded but left out of the check: such an
// operation may have minted a token that nobody saw, which constrains
// nothing (tokens may have gaps). This is the same as treating it as an
// operation that never returned.
package history

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

var (
	// ErrNotLinearizable is returned when a history is not linearizable.
	ErrNotLinearizable = errors.New("history: not linearizable")
	// ErrCheckTimeout is returned when porcupine did not decide in time.
	ErrCheckTimeout = errors.New("history: linearizability check timed out")
)

// Op is one recorded operation. Call and Return are nanoseconds on the
// recorder's monotonic clock.
type Op struct {
	Client   int
	Resource string
	Token    int64
	Err      error
	Call     int64
	Return   int64
}

// Recorder collects operations; it is safe for concurrent use.
type Recorder struct {
	start time.Time
	mu    sync.Mutex
	ops   []Op
	done  []bool
}

// NewRecorder returns an empty recorder whose clock starts now.
func NewRecorder() *Recorder { return &Recorder{start: time.Now()} }

func (r *Recorder) now() int64 { return int64(time.Since(r.start)) }

// Begin records the call of an operation and returns its handle for End.
func (r *Recorder) Begin(client int, resource string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ops = append(r.ops, Op{Client: client, Resource: resource, Call: r.now()})
	r.done = append(r.done, false)
	return len(r.ops) - 1
}

// End records the return of operation h with its token or error.
func (r *Recorder) End(h int, token int64, err error) {
	t := r.now()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ops[h].Return, r.ops[h].Token, r.ops[h].Err = t, token, err
	r.done[h] = true
}

// Ops returns the operations that have ended.
func (r *Recorder) Ops() []Op {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []Op
	for i, op := range r.ops {
		if r.done[i] {
			out = append(out, op)
		}
	}
	return out
}

// Succeeded returns the operations that returned a token.
func Succeeded(ops []Op) []Op {
	return slices.DeleteFunc(slices.Clone(ops), func(op Op) bool { return op.Err != nil })
}

// CheckRealTime checks the successful operations of ops directly in
// O(n log n): tokens are positive and distinct, and every token is greater
// than every token returned by an operation that completed before it
// started. It returns nil or an error describing the first violation.
func CheckRealTime(ops []Op) error {
	ok := Succeeded(ops)
	seen := make(map[int64]int, len(ok))
	for i, op := range ok {
		if op.Token <= 0 {
			return fmt.Errorf("%w: operation %d returned token %d", ErrNotLinearizable, i, op.Token)
		}
		if j, dup := seen[op.Token]; dup {
			return fmt.Errorf("%w: token %d returned twice (clients %d and %d)", ErrNotLinearizable, op.Token, ok[j].Client, op.Client)
		}
		seen[op.Token] = i
	}
	byReturn := slices.Clone(ok)
	sort.Slice(byReturn, func(i, j int) bool { return byReturn[i].Return < byReturn[j].Return })
	byCall := slices.Clone(ok)
	sort.Slice(byCall, func(i, j int) bool { return byCall[i].Call < byCall[j].Call })
	var maxDone int64
	var maxOp Op
	k := 0
	for _, op := range byCall {
		for k < len(byReturn) && byReturn[k].Return < op.Call {
			if byReturn[k].Token > maxDone {
				maxDone, maxOp = byReturn[k].Token, byReturn[k]
			}
			k++
		}
		if op.Token <= maxDone {
			return fmt.Errorf("%w: client %d got token %d at [%d,%d] after client %d had already got token %d (returned at %d)",
				ErrNotLinearizable, op.Client, op.Token, op.Call, op.Return, maxOp.Client, maxOp.Token, maxOp.Return)
		}
	}
	return nil
}

// TokenModel is the porcupine model of the token service: one global
// counter; the state is the last token in linearization order, and a step
// is legal iff its token is greater.
var TokenModel = porcupine.Model{
	Init: func() any { return int64(0) },
	Step: func(state, input, output any) (bool, any) {
		tok := output.(int64)
		if tok > state.(int64) {
			return true, tok
		}
		return false, state
	},
	Equal: func(a, b any) bool { return a.(int64) == b.(int64) },
	Hash:  func(s any) uint64 { return uint64(s.(int64)) },
	DescribeOperation: func(input, output any) string {
		return fmt.Sprintf("next(%s) -> %d", input.(string), output.(int64))
	},
	DescribeState: func(s any) string { return fmt.Sprintf("last=%d", s.(int64)) },
}

// Operations converts the successful operations of ops for porcupine.
func Operations(ops []Op) []porcupine.Operation {
	var out []porcupine.Operation
	for _, op := range Succeeded(ops) {
		out = append(out, porcupine.Operation{ClientId: op.Client, Input: op.Resource, Call: op.Call, Output: op.Token, Return: op.Return})
	}
	return out
}

// TokenModelFor is TokenModel specialised to the history ops: a step is
// legal iff its token is the smallest token of the history above the state.
// Every operation in a checked history completed (failed ones are left out),
// so any linearization under TokenModel must take them in increasing token
// order, and skipping a token makes its operation impossible to place later.
// Both models therefore accept exactly the same linearizations, but this one
// never lets porcupine wander into dead branches, so checking stays fast
// however many operations overlap (TokenModel's search grows exponentially
// with the number of concurrent operations whose call order differs from
// their token order, which group commit makes common).
func TokenModelFor(ops []Op) porcupine.Model {
	var toks []int64
	for _, op := range Succeeded(ops) {
		toks = append(toks, op.Token)
	}
	slices.Sort(toks)
	toks = slices.Compact(toks)
	next := make(map[int64]int64, len(toks))
	prev := int64(0)
	for _, t := range toks {
		next[prev] = t
		prev = t
	}
	m := TokenModel
	m.Step = func(state, input, output any) (bool, any) {
		tok := output.(int64)
		if want, ok := next[state.(int64)]; ok && tok == want {
			return true, tok
		}
		return false, state
	}
	return m
}

// CheckTokens checks ops for linearizability with porcupine, using
// TokenModelFor(ops) (allowing up to a minute). It returns the result and,
// unless it is Ok, an error saying why.
func CheckTokens(ops []Op) (porcupine.CheckResult, error) {
	res, _, _ := check(ops)
	return res, resultErr(res)
}

func check(ops []Op) (porcupine.CheckResult, porcupine.LinearizationInfo, porcupine.Model) {
	m := TokenModelFor(ops)
	res, info := porcupine.CheckOperationsVerbose(m, Operations(ops), time.Minute)
	return res, info, m
}

func resultErr(res porcupine.CheckResult) error {
	switch res {
	case porcupine.Ok:
		return nil
	case porcupine.Unknown:
		return ErrCheckTimeout
	default:
		return ErrNotLinearizable
	}
}

// CheckAndVisualize is CheckTokens that, when the result is not Ok, writes
// porcupine's HTML visualization of the history to path and names the file
// in the returned error.
func CheckAndVisualize(ops []Op, path string) (porcupine.CheckResult, error) {
	res, info, model := check(ops)
	if res == porcupine.Ok {
		return res, nil
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return res, errors.Join(resultErr(res), fmt.Errorf("write visualization: %w", err))
	}
	if err := porcupine.VisualizePath(model, info, path); err != nil {
		return res, errors.Join(resultErr(res), fmt.Errorf("write visualization %s: %w", path, err))
	}
	return res, fmt.Errorf("%w; visualization written to %s", resultErr(res), path)
}

// VisualizationPath returns where a failing check of the named history
// should write its visualization: $FENCEGATE_PORCUPINE_DIR (default the
// system temp directory)/porcupine-NAME.html.
func VisualizationPath(name string) string {
	dir := os.Getenv("FENCEGATE_PORCUPINE_DIR")
	if dir == "" {
		dir = os.TempDir()
	}
	name = strings.NewReplacer("/", "_", " ", "_").Replace(name)
	return filepath.Join(dir, "porcupine-"+name+".html")
}

// Drive makes total calls of next from workers goroutines, worker w making
// calls w, w+workers, ... on resource "res-<w%3>", records them, and
// returns the history. It fails the test on the first error, or when fewer
// than total calls succeeded.
func Drive(t testing.TB, total, workers int, next func(ctx context.Context, worker int, resource string) (int64, error)) []Op {
	t.Helper()
	rec := NewRecorder()
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			res := fmt.Sprintf("res-%d", w%3)
			for i := w; i < total; i += workers {
				h := rec.Begin(w, res)
				tok, err := next(ctx, w, res)
				rec.End(h, tok, err)
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("NextToken: %v", err)
	}
	ops := rec.Ops()
	if got := len(Succeeded(ops)); got != total {
		t.Fatalf("got %d tokens, want %d", got, total)
	}
	return ops
}

// Check fails the test (without stopping it) when ops breaks real-time
// order or is not linearizable; porcupine's visualization of a failure is
// written under VisualizationPath(t.Name()).
func Check(t testing.TB, ops []Op) {
	t.Helper()
	if err := CheckRealTime(ops); err != nil {
		t.Error(err)
	}
	if _, err := CheckAndVisualize(ops, VisualizationPath(t.Name())); err != nil {
		t.Errorf("porcupine: %v", err)
	}
}
