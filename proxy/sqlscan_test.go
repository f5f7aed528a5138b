package proxy

import "testing"

// Only the exact question "SHOW transaction_read_only" is answered as for
// a read-write server; anything else passes through as the client wrote it.
func TestShowReadOnlyRecognized(t *testing.T) {
	for q, want := range map[string]bool{
		"SHOW transaction_read_only":                      true,
		"show TRANSACTION_READ_ONLY;":                     true,
		` SHOW "transaction_read_only" ; `:                true,
		"/* probe */ SHOW transaction_read_only":          true,
		"SHOW default_transaction_read_only":              false,
		"SHOW transaction_isolation":                      false,
		"SELECT 'SHOW transaction_read_only'":             false,
		`SHOW "TRANSACTION_READ_ONLY"`:                    false,
		"SHOW transaction_read_only; SELECT 1":            true, // the statement is; the proxy acts on single statements only
		"SELECT current_setting('transaction_read_only')": false,
	} {
		stmts, ok := scanStatements(nil, []byte(q))
		if !ok || len(stmts) == 0 {
			t.Fatalf("%q: no statements", q)
		}
		if got := stmts[0].showRO; got != want {
			t.Errorf("%q: showRO = %v, want %v", q, got, want)
		}
	}
}
