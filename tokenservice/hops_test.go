package tokenservice

import (
	"net/http/httptest"
	"testing"
)

// The hops header is the caller's word: only a count in 0..maxHops is taken
// as it is, anything else spends the whole forwarding budget.
func TestHopsOf(t *testing.T) {
	t.Parallel()
	for v, want := range map[string]int{"": 0, "0": 0, "1": 1, "2": maxHops, "3": maxHops,
		"-1": maxHops, "-1000": maxHops, "x": maxHops, "1.5": maxHops} {
		r := httptest.NewRequest("POST", "/v1/tokens", nil)
		if v != "" {
			r.Header.Set(hopsHeader, v)
		}
		if got := hopsOf(r); got != want {
			t.Errorf("hops header %q: %d, want %d", v, got, want)
		}
	}
}
