package tokenclient

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/fencegate/fencegate/tokenapi"
)

// TestDecodeAnswer holds the token answers' parser to encoding/json: for
// the answers the service writes and for thousands of mutations of them,
// whatever the parser accepts, json.Unmarshal decodes without error to the
// same value, and decodeAnswer's result and error are json.Unmarshal's.
func TestDecodeAnswer(t *testing.T) {
	t.Parallel()
	rnd := rand.New(rand.NewPCG(5, 6))
	strs := []string{"", "orders/42", "n1", "a<b>&c", "q\"uote", "é", "MEUCIQ+/="}
	ints := []int64{1, 0, -1, 42, math.MaxInt64, math.MinInt64}
	uints := []uint64{0, 7, math.MaxUint64}
	var answers [][]byte
	for i := range 60 {
		tr := tokenapi.TokenResponse{Resource: strs[i%len(strs)], Token: ints[i%len(ints)], Term: uints[i%len(uints)],
			Index: uints[(i+1)%len(uints)], Leader: strs[(i+2)%len(strs)]}
		if i%2 == 0 {
			tr.Proof = strs[(i+3)%len(strs)]
		}
		b, _ := json.Marshal(tr)
		answers = append(answers, append(b, '\n'))
		br := tokenapi.BatchResponse{Term: tr.Term, Index: tr.Index, Leader: tr.Leader}
		for j := range i % 4 {
			br.Tokens = append(br.Tokens, tokenapi.BatchToken{Resource: strs[(i+j)%len(strs)], Token: ints[(i+j)%len(ints)], Proof: strs[j%2]})
		}
		b, _ = json.Marshal(br)
		answers = append(answers, b)
	}
	// The service's plain form takes the parser, not the fallback.
	plain := `{"resource":"orders/42","token":1234,"proof":"p","term":3,"index":5678,"leader":"n1"}` + "\n"
	if !parseTokenResponse([]byte(plain), &tokenapi.TokenResponse{}) {
		t.Errorf("parser refused the service's answer %q", plain)
	}
	if !parseBatchResponse([]byte(`{"tokens":[{"resource":"a","token":1},{"resource":"b","token":2}],"term":3,"index":5,"leader":"n1"}`+"\n"), &tokenapi.BatchResponse{}) {
		t.Errorf("parser refused the service's batch answer")
	}
	// Numbers and strings at the edges of what the parser takes.
	for _, tok := range []string{"01", "00", "-0", "-", "1.5", "1e3", "1E+3", "9223372036854775807", "9223372036854775808",
		"-9223372036854775808", "-9223372036854775809", "99999999999999999999", `"1"`, "true", "null", " 1"} {
		check(t, []byte(`{"resource":"a","token":`+tok+`,"term":3,"index":5,"leader":"n1"}`))
		check(t, []byte(`{"tokens":[{"resource":"a","token":`+tok+`}],"term":3,"index":5,"leader":"n1"}`))
	}
	for _, u := range []string{"0", "01", "-1", "-0", "18446744073709551615", "18446744073709551616", "1.0", "2e1"} {
		check(t, []byte(`{"resource":"a","token":1,"term":`+u+`,"index":`+u+`,"leader":"n1"}`))
	}
	for _, s := range []string{`"n\u0031"`, `"n\"1"`, `"a\/b"`, "\"\x01\"", "\"\xc3\xa9\"", `""`, `"`, `n1`} {
		check(t, []byte(`{"resource":`+s+`,"token":1,"term":3,"index":5,"leader":`+s+`}`))
	}
	for _, tail := range []string{"", "\n", " \t\r\n", "x", "}", "\n{}", ","} {
		check(t, []byte(`{"resource":"a","token":1,"term":3,"index":5,"leader":"n1"}`+tail))
	}
	const alphabet = `{}[],:"\-0123456789.eE +tnr` + "\n\xff"
	for _, a := range answers {
		check(t, a)
		for range 150 {
			m := append([]byte(nil), a...)
			for range 1 + rnd.IntN(2) {
				i := rnd.IntN(len(m))
				switch rnd.IntN(3) {
				case 0:
					m[i] = alphabet[rnd.IntN(len(alphabet))]
				case 1:
					m = append(m[:i], m[i+1:]...)
				default:
					m = append(m[:i], append([]byte{alphabet[rnd.IntN(len(alphabet))]}, m[i:]...)...)
				}
				if len(m) == 0 {
					break
				}
			}
			check(t, m)
		}
	}
}

func check(t *testing.T, data []byte) {
	t.Helper()
	for _, mk := range []func() any{func() any { return new(tokenapi.TokenResponse) }, func() any { return new(tokenapi.BatchResponse) }} {
		fast, slow := mk(), mk()
		errFast, errSlow := decodeAnswer(data, fast), json.Unmarshal(data, slow)
		if (errFast == nil) != (errSlow == nil) || (errSlow != nil && errFast.Error() != errSlow.Error()) {
			t.Fatalf("%q into %T: decodeAnswer says %v, json.Unmarshal %v", data, fast, errFast, errSlow)
		}
		if errSlow == nil && !reflect.DeepEqual(fast, slow) {
			t.Fatalf("%q into %T:\ndecodeAnswer %+v\njson         %+v", data, fast, fast, slow)
		}
	}
}
