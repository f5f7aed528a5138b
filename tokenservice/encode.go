package tokenservice

import (
	"encoding/json"
	"net/http"
	"strconv"
	"sync"

	"github.com/fencegate/fencegate/tokenapi"
)

// The answers to POST /v1/tokens are written by hand rather than by
// encoding/json's reflection: on the leader they are a large part of the
// CPU a token costs. The bytes are those json.NewEncoder(w).Encode writes
// for the same value (TestTokenAnswerBytes pins them): field names and
// order, "proof" left out when empty, strings escaped as encoding/json
// escapes them, and the trailing newline.

// encodeBufs holds answer buffers between requests; a buffer that grew
// past maxPooledAnswer (a large batch) is dropped rather than kept.
var encodeBufs = sync.Pool{New: func() any { b := make([]byte, 0, 256); return &b }}

const maxPooledAnswer = 64 << 10

// appendTokenResponse appends the JSON of r and a newline to b.
func appendTokenResponse(b []byte, r *tokenapi.TokenResponse) []byte {
	b = append(b, `{"resource":`...)
	b = appendJSONString(b, r.Resource)
	b = append(b, `,"token":`...)
	b = strconv.AppendInt(b, r.Token, 10)
	if r.Proof != "" {
		b = append(b, `,"proof":`...)
		b = appendJSONString(b, r.Proof)
	}
	b = append(b, `,"term":`...)
	b = strconv.AppendUint(b, r.Term, 10)
	b = append(b, `,"index":`...)
	b = strconv.AppendUint(b, r.Index, 10)
	b = append(b, `,"leader":`...)
	b = appendJSONString(b, r.Leader)
	return append(b, "}\n"...)
}

// appendBatchResponse appends the JSON of r and a newline to b.
func appendBatchResponse(b []byte, r *tokenapi.BatchResponse) []byte {
	if r.Tokens == nil {
		b = append(b, `{"tokens":null`...)
	} else {
		b = append(b, `{"tokens":[`...)
		for i := range r.Tokens {
			t := &r.Tokens[i]
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"resource":`...)
			b = appendJSONString(b, t.Resource)
			b = append(b, `,"token":`...)
			b = strconv.AppendInt(b, t.Token, 10)
			if t.Proof != "" {
				b = append(b, `,"proof":`...)
				b = appendJSONString(b, t.Proof)
			}
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	b = append(b, `,"term":`...)
	b = strconv.AppendUint(b, r.Term, 10)
	b = append(b, `,"index":`...)
	b = strconv.AppendUint(b, r.Index, 10)
	b = append(b, `,"leader":`...)
	b = appendJSONString(b, r.Leader)
	return append(b, "}\n"...)
}

// appendJSONString appends s as a JSON string. Printable ASCII that
// encoding/json writes as is (everything from space to '~' but '"', '\\',
// and the HTML characters '<', '>', '&' it escapes) is copied; any other
// string is left to encoding/json, so that escapes, invalid UTF-8 and
// U+2028/U+2029 come out as it writes them.
func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s)
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// Header values of every JSON answer, and the header keys in canonical form
// (assigned directly, they skip Header.Set's canonicalization).
var jsonContentType = []string{"application/json"}

// writeAnswer writes b, a 200 JSON answer encoded into the pooled buffer
// bp, with the same headers as writeJSON, and returns the buffer to the
// pool.
func writeAnswer(w http.ResponseWriter, bp *[]byte, b []byte) {
	h := w.Header()
	h["Content-Type"] = jsonContentType
	h["Content-Length"] = []string{strconv.Itoa(len(b))}
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(b)
	if cap(b) <= maxPooledAnswer {
		*bp = b[:0]
		encodeBufs.Put(bp)
	}
}
