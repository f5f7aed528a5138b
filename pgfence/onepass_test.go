package pgfence_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/internal/testutil"
)

// TestStatementCheckOddRow attacks the statement checks' one-resource pass
// (schema version 8): a statement whose rows all share the first row's
// resource is checked with one probe, any other is grouped and each
// resource probed. Each statement below writes many rows of a fenced
// resource and one odd row, first, in the middle or last, whose resource is
// unfenced, NULL, or differs from the fenced one only in its bytes (case, a
// trailing space, a composed accent against a decomposed one); INSERT ...
// SELECT, VALUES, COPY, UPDATE, DELETE and MERGE, through a table that
// holds rows and its inheritance child. Each must be refused and change
// nothing; the same statement without the odd row must pass.
func TestStatementCheckOddRow(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	mustExec(t, f.admin, `SET ROLE `+f.data+`;
		CREATE TABLE shop.tags (id int PRIMARY KEY, tag text);
		RESET ROLE;
		GRANT SELECT, INSERT, UPDATE, DELETE ON shop.tags TO `+f.db.App+`;
		SELECT fencegate.protect('shop.tags', $$'tag:' || tag$$)`)

	copyRows := func(odd string, at int) string {
		var b strings.Builder
		b.WriteString("COPY shop.tags (id, tag) FROM STDIN")
		for i := 0; i < 300; i++ {
			tag := "a"
			if i == at {
				tag = odd
			}
			fmt.Fprintf(&b, "\n%d\t%s", 1000+i, tag)
		}
		return b.String()
	}
	// tagged inserts 300 rows of tag 'a' with the odd one at position at.
	tagged := func(odd string, at int) string {
		return fmt.Sprintf(`INSERT INTO shop.tags SELECT g, CASE WHEN g = %d THEN %s ELSE 'a' END FROM generate_series(1000, 1299) g`, 1000+at, odd)
	}
	odds := []struct {
		name, lit, copyText, code, names string
	}{
		{"another resource", "'b'", "b", fencegate.CodeUnfenced, "'tag:b'"},
		{"NULL", "NULL", `\N`, fencegate.CodeMisuse, "NULL"},
		{"upper case", "'A'", "A", fencegate.CodeUnfenced, "'tag:A'"},
		{"trailing space", "'a '", "a ", fencegate.CodeUnfenced, "'tag:a '"},
		{"decomposed accent", "'a' || U&'\\0301'", "a\u0301", fencegate.CodeUnfenced, "tag:a\u0301"},
	}
	for _, odd := range odds {
		for _, at := range []int{0, 150, 299} {
			for _, stmt := range []string{tagged(odd.lit, at), copyRows(odd.copyText, at)} {
				name := strings.SplitN(stmt, " ", 2)[0]
				t.Run(fmt.Sprintf("%s %s at %d", name, odd.name, at), func(t *testing.T) {
					before := f.snapshot(t)
					err := attempt(ctx, f.app, []string{"tag:a", "order:999"}, []string{stmt}, true)
					wantRefused(t, err, odd.code, odd.names)
					if after := f.snapshot(t); after != before {
						t.Fatal("the refused write changed the data")
					}
				})
			}
		}
	}
	for _, stmt := range []string{tagged("'a'", 0), copyRows("a", 0)} {
		if err := attempt(ctx, f.app, []string{"tag:a"}, []string{stmt, "DELETE FROM shop.tags WHERE id >= 1000"}, true); err != nil {
			t.Fatalf("fenced write of one resource refused: %v", err)
		}
	}

	// UPDATE, DELETE and MERGE over rows already there: 300 of tag 'a' and
	// one odd row; and through the ledger and its inheritance child.
	if err := attempt(ctx, f.app, []string{"tag:a", "tag:b"}, []string{tagged("'b'", 299)}, true); err != nil {
		t.Fatal(err)
	}
	mustExec(t, f.admin, `SELECT fencegate.fence('acct:7', 1); INSERT INTO shop.ledger SELECT g, 7, 0 FROM generate_series(10, 309) g`)
	for _, stmt := range []string{
		"UPDATE shop.tags SET id = id + 0",
		"UPDATE shop.tags SET id = id + 0 WHERE tag IN ('a', 'b')",
		"DELETE FROM shop.tags",
		"UPDATE shop.ledger SET amt = amt + 1",
		"DELETE FROM shop.ledger",
		"WITH u AS (UPDATE shop.tags SET id = id + 0 RETURNING 1) SELECT count(*) FROM u",
		"MERGE INTO shop.tags t USING (SELECT id FROM shop.tags) s ON t.id = s.id WHEN MATCHED THEN UPDATE SET id = t.id + 0",
		"MERGE INTO shop.tags t USING (SELECT id FROM shop.tags) s ON t.id = s.id WHEN MATCHED THEN DELETE",
	} {
		t.Run(stmt, func(t *testing.T) {
			if strings.HasPrefix(stmt, "MERGE") {
				testutil.NeedMajor(t, 15, "MERGE")
			}
			before := f.snapshot(t)
			err := attempt(ctx, f.app, []string{"tag:a", "acct:7"}, []string{stmt}, true)
			wantRefused(t, err, fencegate.CodeUnfenced)
			if after := f.snapshot(t); after != before {
				t.Fatal("the refused write changed the data")
			}
			if err := attempt(ctx, f.app, []string{"tag:a", "tag:b", "acct:7", "acct:8"}, []string{stmt}, false); err != nil {
				t.Fatalf("fenced on every resource, refused: %v", err)
			}
		})
	}
}
