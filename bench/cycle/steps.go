package main

import (
	"context"
	"slices"
	"sync"
	"time"
)

// steps records how long each step of a cycle took, so that the one-worker
// table can say where the fenced cycle's extra time goes. A scenario marks
// the end of each step with lap; steps are kept only while recording is on
// (the measured runs at one worker), and only by name order of first use.
type steps struct {
	mu    sync.Mutex
	on    bool
	names []string
	d     map[string][]time.Duration
}

// stopwatch times the steps of one cycle.
type stopwatch struct {
	s    *steps
	last time.Time
}

func (s *steps) start() stopwatch {
	if s == nil {
		return stopwatch{}
	}
	s.mu.Lock()
	on := s.on
	s.mu.Unlock()
	if !on {
		return stopwatch{}
	}
	return stopwatch{s: s, last: time.Now()}
}

// lap records the time since the last lap (or the start) as step name.
func (w *stopwatch) lap(name string) {
	if w.s == nil {
		return
	}
	now := time.Now()
	w.s.mu.Lock()
	if w.s.d == nil {
		w.s.d = map[string][]time.Duration{}
	}
	if _, ok := w.s.d[name]; !ok {
		w.s.names = append(w.s.names, name)
	}
	w.s.d[name] = append(w.s.d[name], now.Sub(w.last))
	w.s.mu.Unlock()
	w.last = now
}

// record turns recording on or off.
func (s *steps) record(on bool) {
	s.mu.Lock()
	s.on = on
	s.mu.Unlock()
}

// medians returns each step's name and median, in the order first used,
// and the number of cycles of the step recorded most often.
func (s *steps) medians() (names []string, meds []time.Duration, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, name := range s.names {
		ds := slices.Clone(s.d[name])
		slices.Sort(ds)
		names = append(names, name)
		meds = append(meds, ds[len(ds)/2])
		n = max(n, len(ds))
	}
	return names, meds, n
}

type watchKey struct{}

// withWatch carries w to the token source, which Acquire calls with a
// context derived from its own.
func withWatch(ctx context.Context, w *stopwatch) context.Context {
	if w.s == nil {
		return ctx
	}
	return context.WithValue(ctx, watchKey{}, w)
}

// timedTokens times the token request inside Acquire: the step before it
// is the grant, the step after it the confirmation.
type timedTokens struct {
	inner interface {
		NextToken(ctx context.Context, resource string) (int64, error)
	}
}

func (t timedTokens) NextToken(ctx context.Context, resource string) (int64, error) {
	w, _ := ctx.Value(watchKey{}).(*stopwatch)
	if w == nil {
		return t.inner.NextToken(ctx, resource)
	}
	w.lap("grant")
	tok, err := t.inner.NextToken(ctx, resource)
	w.lap("token")
	return tok, err
}
