package proxy

import (
	"encoding/binary"
	"strings"

	"github.com/jackc/pgx/v5/pgproto3"
)

// Names of the statements and portals the proxy prepares in a session. They
// are visible in pg_prepared_statements; clients never see their messages.
const (
	rwStmtName    = "fencegate_rw"
	aloneStmtName = "fencegate_alone"
)

// Pre-encoded frontend messages the proxy injects. Each group is five
// messages (Close portal, Close statement, Parse, Bind, Execute), so five
// response units; see inject.go.
var (
	injectReadWrite = buildInjection(rwStmtName, setReadWriteSQL)
	injectAlone     = buildInjection(aloneStmtName, raiseSQL(CodeMisuse,
		"fencegate: fencegate.fence alone in autocommit protects nothing",
		"Call SELECT fencegate.fence(resource, token) inside the transaction that writes: BEGIN; SELECT fencegate.fence(...); UPDATE ...; COMMIT."))
)

const injectUnits = 5

func buildInjection(name, sql string) []byte {
	var b []byte
	b, _ = (&pgproto3.Close{ObjectType: 'P', Name: name}).Encode(b)
	b, _ = (&pgproto3.Close{ObjectType: 'S', Name: name}).Encode(b)
	b, _ = (&pgproto3.Parse{Name: name, Query: sql}).Encode(b)
	b, _ = (&pgproto3.Bind{DestinationPortal: name, PreparedStatement: name}).Encode(b)
	b, _ = (&pgproto3.Execute{Portal: name}).Encode(b)
	return b
}

// raiseSQL returns an anonymous code block that raises an error with the
// given SQLSTATE, message and hint. The proxy sends it in place of a client
// statement it refuses, so that the error reaches the client in order and
// aborts the transaction exactly as a failing statement would.
func raiseSQL(code, msg, hint string) string {
	q := func(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }
	return "DO $fencegate$BEGIN RAISE EXCEPTION USING ERRCODE = " + q(code) +
		", MESSAGE = " + q(msg) + ", HINT = " + q(hint) + "; END$fencegate$"
}

var (
	raiseAloneSQL = raiseSQL(CodeMisuse,
		"fencegate: fencegate.fence alone in autocommit protects nothing",
		"Call SELECT fencegate.fence(resource, token) inside the transaction that writes: BEGIN; SELECT fencegate.fence(...); UPDATE ...; COMMIT.")
	raiseReadWriteSQL = raiseSQL(CodeUnfenced,
		"fencegate: switching to read-write is refused: transactions become read-write only by taking a fence",
		"Begin the transaction that writes with SELECT fencegate.fence(resource, token).")
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

// containsFold reports whether s contains the lower-case ASCII sub,
// ignoring ASCII case in s. It does not allocate.
func containsFold(s []byte, sub string) bool {
	if len(sub) == 0 {
		return true
	}
	c0 := sub[0]
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i]|0x20 != c0 {
			continue
		}
		j := 1
		for ; j < len(sub); j++ {
			if s[i+j]|0x20 != sub[j] && s[i+j] != sub[j] {
				break
			}
		}
		if j == len(sub) {
			return true
		}
	}
	return false
}
