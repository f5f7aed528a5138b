package proxy

import (
	"strings"

	"github.com/fencegate/fencegate"
	"github.com/jackc/pgx/v5/pgproto3"
)

// maxTableLabels bounds the distinct table labels of the rejection metric
// (a client can raise any SQLSTATE with any table name itself); past it,
// rejections count under table "other".
const maxTableLabels = 1000

// countError counts and logs an ErrorResponse the server sends a client
// when its SQLSTATE is one of fencegate's.
func (s *session) countError(body []byte) {
	e, err := decodeError(body)
	if err != nil {
		return
	}
	switch e.Code {
	case fencegate.CodeStaleToken, fencegate.CodeUnfenced, fencegate.CodeMisuse, fencegate.CodeFenceTimeout,
		fencegate.CodeSchemaInvalid, fencegate.CodeProtectedDDL:
	default:
		return
	}
	table := errorTable(e)
	s.p.metrics.reject(e.Code, table)
	s.log.Info("fencegate error sent to the client", "sqlstate", e.Code, "table", table, "message", e.Message)
}

// errorTable names the table of a fencegate error: its table and schema
// fields when the server set them, else the table a refused write's message
// names ("fencegate: write to public.orders refused: ...").
func errorTable(e *pgproto3.ErrorResponse) string {
	if e.TableName != "" {
		if e.SchemaName != "" {
			return e.SchemaName + "." + e.TableName
		}
		return e.TableName
	}
	const prefix = "fencegate: write to "
	if e.Code != fencegate.CodeUnfenced || !strings.HasPrefix(e.Message, prefix) {
		return ""
	}
	rest := e.Message[len(prefix):]
	if i := strings.LastIndex(rest, " refused: "); i > 0 {
		return rest[:i]
	}
	return ""
}

// decodeError decodes an ErrorResponse body.
func decodeError(body []byte) (*pgproto3.ErrorResponse, error) {
	e := &pgproto3.ErrorResponse{}
	if err := e.Decode(body); err != nil {
		return nil, err
	}
	return e, nil
}
