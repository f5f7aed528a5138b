package proxy

// SessionStates returns, for tests, what the request tracker of each open
// session says: "idle" (every request answered, no transaction open),
// "busy" or "lost".
func (p *Proxy) SessionStates() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for s := range p.sessions {
		t := &s.track
		t.mu.Lock()
		switch {
		case t.lost:
			out = append(out, "lost")
		case t.idle():
			out = append(out, "idle")
		default:
			out = append(out, "busy")
		}
		t.mu.Unlock()
	}
	return out
}

// SetGatePins replaces, for tests, the settings the gate pins after its
// BEGIN (statements joined by "; ", each starting with SET LOCAL; the
// timeouts stay), and returns a function that restores them.
func SetGatePins(pins string) (restore func()) {
	old, old17 := gatePrelude, gatePrelude17
	p := "; SET LOCAL statement_timeout = '" + gateTimeout + "'; SET LOCAL lock_timeout = '" + gateTimeout + "'; " + pins
	gatePrelude = gateBegin + p
	gatePrelude17 = gateBegin + "; SET LOCAL transaction_timeout = 0" + p
	return func() { gatePrelude, gatePrelude17 = old, old17 }
}
