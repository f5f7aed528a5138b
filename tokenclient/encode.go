package tokenclient

import "encoding/json"

// Request bodies of POST /v1/tokens are written by hand rather than by
// encoding/json's reflection, which cost a share of the client's CPU per
// token. The bytes are json.Marshal's (TestRequestBytes pins them).

// plainJSON reports whether encoding/json writes s as itself between
// quotes: printable ASCII but '"', '\\' and the HTML characters '<', '>',
// '&' it escapes.
func plainJSON(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			return false
		}
	}
	return true
}

// appendJSONString appends s as encoding/json writes it.
func appendJSONString(b []byte, s string) []byte {
	if !plainJSON(s) {
		q, _ := json.Marshal(s)
		return append(b, q...)
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// singleBody is the body {"resource":R}.
func singleBody(resource string) []byte {
	b := make([]byte, 0, len(`{"resource":""}`)+len(resource))
	b = append(b, `{"resource":`...)
	b = appendJSONString(b, resource)
	return append(b, '}')
}

// batchBody is the body {"resources":[R1,R2,...]} for the queued callers;
// size is the sum of their encodedSize.
func batchBody(batch []*pendingToken, size int) []byte {
	b := make([]byte, 0, len(`{"resources":[]}`)+size)
	b = append(b, `{"resources":[`...)
	for i, p := range batch {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendJSONString(b, p.resource)
	}
	return append(b, "]}"...)
}
