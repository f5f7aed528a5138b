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
