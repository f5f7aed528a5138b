package tokenclient

import (
	"encoding/json"
	"math/rand/v2"
	"testing"

	"github.com/fencegate/fencegate/tokenapi"
)

// TestRequestBytes pins the hand-written request bodies and encodedSize to
// encoding/json's bytes for names that need no escape and for every kind
// that does.
func TestRequestBytes(t *testing.T) {
	t.Parallel()
	names := []string{"", "orders/42", "a b~", "q\"uote", `back\slash`, "<html>&amp;", "tab\t\x01\x7f",
		"é 日本", "\u2028\u2029", "bad\xffutf8\xc3", "\x00"}
	rnd := rand.New(rand.NewPCG(3, 4))
	for range 500 {
		b := make([]byte, rnd.IntN(12))
		for i := range b {
			if rnd.IntN(4) == 0 {
				b[i] = byte(rnd.IntN(256))
			} else {
				b[i] = byte(0x20 + rnd.IntN(0x5f))
			}
		}
		names = append(names, string(b))
	}
	for _, n := range names {
		want, _ := json.Marshal(tokenapi.TokenRequest{Resource: n})
		if n == "" {
			want = []byte(`{"resource":""}`) // the client never sends it; the form still holds
		}
		if got := singleBody(n); string(got) != string(want) {
			t.Errorf("single %q:\n got %s\nwant %s", n, got, want)
		}
		q, _ := json.Marshal(n)
		if got := encodedSize(n); got != len(q)+1 {
			t.Errorf("encodedSize(%q) = %d, want %d", n, got, len(q)+1)
		}
	}
	for i := 0; i+4 <= len(names); i += 4 {
		var batch []*pendingToken
		size := 0
		for _, n := range names[i : i+1+i%4] {
			batch = append(batch, &pendingToken{resource: n, size: encodedSize(n)})
			size += encodedSize(n)
		}
		req := tokenapi.TokenRequest{}
		for _, p := range batch {
			req.Resources = append(req.Resources, p.resource)
		}
		want, _ := json.Marshal(req)
		got := batchBody(batch, size)
		if string(got) != string(want) {
			t.Errorf("batch %q:\n got %s\nwant %s", req.Resources, got, want)
		}
		if cap(got) != len(`{"resources":[]}`)+size {
			t.Errorf("batch %q: body of %d bytes in a buffer of %d, want exactly the sized buffer", req.Resources, len(got), cap(got))
		}
	}
}
