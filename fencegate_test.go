package fencegate_test

import (
	"strings"
	"testing"

	"github.com/fencegate/fencegate"
)

// TestCodes: every code is a distinct five-character SQLSTATE of class FG,
// which PostgreSQL itself never raises.
func TestCodes(t *testing.T) {
	seen := map[string]bool{}
	for _, c := range []string{fencegate.CodeStaleToken, fencegate.CodeUnfenced, fencegate.CodeMisuse, fencegate.CodeFenceTimeout,
		fencegate.CodeSchemaInvalid, fencegate.CodeProtectedDDL, fencegate.CodePrivilegedRole, fencegate.CodeBadProof} {
		if len(c) != 5 || !strings.HasPrefix(c, "FG") || seen[c] {
			t.Fatalf("code %q is not a distinct SQLSTATE of class FG", c)
		}
		seen[c] = true
	}
	for _, q := range []string{fencegate.FenceSQL, fencegate.FenceManySQL, fencegate.FenceSignedSQL} {
		if !strings.Contains(q, "::bigint") {
			t.Fatalf("%q does not cast its arguments: an overload could capture it", q)
		}
	}
}
