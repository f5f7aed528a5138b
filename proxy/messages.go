package proxy

import (
	"encoding/binary"

	"github.com/jackc/pgx/v5/pgproto3"
)

// errorBody encodes an ErrorResponse body (without type and length).
func errorBody(severity, code, msg, hint string) []byte {
	b, _ := (&pgproto3.ErrorResponse{Severity: severity, SeverityUnlocalized: severity, Code: code, Message: msg, Hint: hint}).Encode(nil)
	return b[5:]
}

// queryMsg encodes a simple Query message.
func queryMsg(dst []byte, sql string) []byte {
	dst = append(dst, 'Q', 0, 0, 0, 0)
	binary.BigEndian.PutUint32(dst[len(dst)-4:], uint32(len(sql)+5))
	dst = append(dst, sql...)
	return append(dst, 0)
}
