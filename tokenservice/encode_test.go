package tokenservice

import (
	"bytes"
	"encoding/json"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/fencegate/fencegate/tokenapi"
)

// encodingJSON is what writeJSON wrote for v: the bytes the hand-written
// answers must reproduce.
func encodingJSON(t *testing.T, v any) string {
	t.Helper()
	var buf bytes.Buffer
	if err := json.NewEncoder(&buf).Encode(v); err != nil {
		t.Fatal(err)
	}
	return buf.String()
}

// TestTokenAnswerBytes pins the hand-written answers of POST /v1/tokens to
// encoding/json's bytes, byte for byte, for strings that need no escape
// and for every kind that does.
func TestTokenAnswerBytes(t *testing.T) {
	t.Parallel()
	strs := []string{"", "orders/42", "account:42", "n1", "a b~", "q\"uote", `back\slash`, "<html>&amp;",
		"tab\tnl\n\x01\x7f", "é ü 日本", "\u2028\u2029", "bad\xffutf8\xc3", "MEUCIQ+/=_-", "\x00"}
	// And random strings of bytes, mostly printable ASCII.
	rnd := rand.New(rand.NewPCG(1, 2))
	for range 500 {
		b := make([]byte, rnd.IntN(12))
		for i := range b {
			if rnd.IntN(4) == 0 {
				b[i] = byte(rnd.IntN(256))
			} else {
				b[i] = byte(0x20 + rnd.IntN(0x5f))
			}
		}
		strs = append(strs, string(b))
	}
	ints := []int64{0, 1, -1, 1234, math.MaxInt64, math.MinInt64}
	uints := []uint64{0, 3, 5678, math.MaxUint64}
	for i, s := range strs {
		r := tokenapi.TokenResponse{Resource: s, Token: ints[i%len(ints)], Proof: strs[(i+1)%len(strs)],
			Term: uints[i%len(uints)], Index: uints[(i+1)%len(uints)], Leader: strs[(i+2)%len(strs)]}
		if got, want := string(appendTokenResponse(nil, &r)), encodingJSON(t, r); got != want {
			t.Errorf("TokenResponse %+v:\n got %q\nwant %q", r, got, want)
		}
	}
	batches := []tokenapi.BatchResponse{
		{},
		{Tokens: []tokenapi.BatchToken{}},
		{Tokens: []tokenapi.BatchToken{{Resource: "a", Token: 1235}, {Resource: "b", Token: 1236, Proof: "p"}}, Term: 3, Index: 5678, Leader: "n1"},
	}
	for i := 0; i+3 <= len(strs); i += 3 {
		batches = append(batches, tokenapi.BatchResponse{
			Tokens: []tokenapi.BatchToken{{Resource: strs[i], Token: ints[i%len(ints)], Proof: strs[i+1]}, {Resource: strs[i+2], Token: 7}},
			Term:   uints[i%len(uints)], Index: uints[(i+1)%len(uints)], Leader: strs[i+1],
		})
	}
	for _, r := range batches {
		if got, want := string(appendBatchResponse(nil, &r)), encodingJSON(t, r); got != want {
			t.Errorf("BatchResponse %+v:\n got %q\nwant %q", r, got, want)
		}
	}
	// The documented example, as docs/protocol.md shows it.
	ex := tokenapi.TokenResponse{Resource: "account:42", Token: 1234, Term: 3, Index: 5678, Leader: "n1"}
	if got, want := string(appendTokenResponse(nil, &ex)), `{"resource":"account:42","token":1234,"term":3,"index":5678,"leader":"n1"}`+"\n"; got != want {
		t.Errorf("documented example:\n got %q\nwant %q", got, want)
	}
}
