// Package payprovider is a payment provider on loopback, as fencegate's
// tests, demo and fault campaign need one: an HTTP server that charges once
// per Idempotency-Key, as payment providers do (a repeated key gets the
// first answer again and charges nothing), and that can misbehave on
// purpose: answer 503, stall past the caller's timeout, or charge and then
// close the connection without answering.
package payprovider

import (
	"encoding/json"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"sync"
	"time"
)

// Charge is one charge the provider made.
type Charge struct {
	Key      string          // Idempotency-Key
	Resource string          // Fencing-Resource, decoded
	Token    int64           // Fencing-Token
	Body     json.RawMessage // the request body
	At       time.Time
}

// Faults makes the provider misbehave, each a probability per request
// (0 to 1) drawn before the request is looked at.
type Faults struct {
	// Unavailable answers 503 without charging.
	Unavailable float64
	// Stall waits StallFor (past the caller's timeout) and then charges
	// and answers: the caller gave up, the charge happened.
	Stall    float64
	StallFor time.Duration
	// CloseAfterCharge charges and then closes the connection without an
	// answer.
	CloseAfterCharge float64
}

// Provider is the server. Start it with Start.
type Provider struct {
	srv *httptest.Server

	mu       sync.Mutex
	faults   Faults
	byKey    map[string]int // index into charges
	charges  []Charge
	requests int
	dupes    int // requests whose key had charged before
	inflight map[string]int
	overlaps int // requests that arrived while another of their key was in flight
	// Reject, when set, answers 422 (and charges nothing) to a request it
	// returns true for.
	Reject   func(body []byte) bool
	onCharge func(Charge)
}

// SetOnCharge has f called after each new charge, before the answer is
// sent (nil: nothing).
func (p *Provider) SetOnCharge(f func(Charge)) { p.mu.Lock(); p.onCharge = f; p.mu.Unlock() }

// Start starts a provider on a loopback port.
func Start(f Faults) *Provider {
	p := &Provider{faults: f, byKey: map[string]int{}, inflight: map[string]int{}}
	p.srv = httptest.NewServer(http.HandlerFunc(p.serve))
	return p
}

// URL is where to POST charges.
func (p *Provider) URL() string { return p.srv.URL + "/charges" }

// Close stops the server.
func (p *Provider) Close() { p.srv.Close() }

// SetFaults changes the faults.
func (p *Provider) SetFaults(f Faults) { p.mu.Lock(); p.faults = f; p.mu.Unlock() }

// Charges returns every charge made, in the order made.
func (p *Provider) Charges() []Charge {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]Charge(nil), p.charges...)
}

// Stats returns how many requests arrived, how many of them repeated a key
// that had charged, and how many arrived while another request with their
// key was still being served (two senders of one effect at once).
func (p *Provider) Stats() (requests, repeats, overlaps int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.requests, p.dupes, p.overlaps
}

func (p *Provider) serve(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		http.Error(w, "POST only", http.StatusMethodNotAllowed)
		return
	}
	key := r.Header.Get("Idempotency-Key")
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		return
	}
	if key == "" {
		http.Error(w, "missing Idempotency-Key", http.StatusBadRequest)
		return
	}
	res, err := url.PathUnescape(r.Header.Get("Fencing-Resource"))
	if err != nil {
		http.Error(w, "bad Fencing-Resource", http.StatusBadRequest)
		return
	}
	tok, _ := strconv.ParseInt(r.Header.Get("Fencing-Token"), 10, 64)
	p.mu.Lock()
	p.requests++
	if p.inflight[key] > 0 {
		p.overlaps++
	}
	p.inflight[key]++
	f := p.faults
	roll := rand.Float64()
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		p.inflight[key]--
		p.mu.Unlock()
	}()
	switch {
	case roll < f.Unavailable:
		http.Error(w, "try again later", http.StatusServiceUnavailable)
		return
	case roll < f.Unavailable+f.Stall:
		select {
		case <-time.After(f.StallFor):
		case <-r.Context().Done():
		}
		p.charge(key, res, tok, body)
		return // the caller is gone
	case roll < f.Unavailable+f.Stall+f.CloseAfterCharge:
		p.charge(key, res, tok, body)
		if hj, ok := w.(http.Hijacker); ok {
			if c, _, err := hj.Hijack(); err == nil {
				if tc, ok := c.(*net.TCPConn); ok {
					tc.SetLinger(0) //nolint:errcheck // a reset, as a crash would send
				}
				c.Close()
				return
			}
		}
		return
	}
	if p.Reject != nil && p.Reject(body) {
		http.Error(w, `{"error": "card declined"}`, http.StatusUnprocessableEntity)
		return
	}
	n, first := p.charge(key, res, tok, body)
	w.Header().Set("Content-Type", "application/json")
	if !first {
		w.Header().Set("Idempotent-Replayed", "true")
	}
	json.NewEncoder(w).Encode(map[string]any{"charge": n, "key": key}) //nolint:errcheck
}

// charge charges key once and returns the charge's number and whether this
// call made it.
func (p *Provider) charge(key, res string, tok int64, body []byte) (int, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if i, ok := p.byKey[key]; ok {
		p.dupes++
		return i + 1, false
	}
	p.byKey[key] = len(p.charges)
	c := Charge{Key: key, Resource: res, Token: tok, Body: append(json.RawMessage(nil), body...), At: time.Now()}
	p.charges = append(p.charges, c)
	if f := p.onCharge; f != nil {
		p.mu.Unlock()
		f(c)
		p.mu.Lock()
	}
	return len(p.charges), true
}
