package tokenapi_test

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"
	"unicode"

	"github.com/fencegate/fencegate/tokenapi"
)

// ResourceCase is one case of the shared resource-name table,
// testdata/resource-names.json: the Go, Python and Node.js clients' suites
// run the same file.
type resourceCase struct {
	Hex   string `json:"hex"`
	Valid bool   `json:"valid"`
	Why   string `json:"why"`
}

func loadResourceCases(t *testing.T) []resourceCase {
	t.Helper()
	raw, err := os.ReadFile("testdata/resource-names.json")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct{ Cases []resourceCase }
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Cases) < 30 {
		t.Fatalf("%d cases in the table; it lost some", len(doc.Cases))
	}
	return doc.Cases
}

// The service's validator decides every case of the shared table as the
// table says: the table is the rule's one written form.
func TestResourceNameTable(t *testing.T) {
	cases := loadResourceCases(t)
	valid := 0
	for _, c := range cases {
		b, err := hex.DecodeString(c.Hex)
		if err != nil {
			t.Fatalf("case %q: %v", c.Why, err)
		}
		err = tokenapi.ValidateResource(string(b))
		switch {
		case c.Valid && err != nil:
			t.Errorf("%s (%q): refused: %v; the table takes it", c.Why, b, err)
		case !c.Valid && err == nil:
			t.Errorf("%s (%q): taken; the table refuses it", c.Why, b)
		case !c.Valid && !errors.Is(err, tokenapi.ErrBadRequest):
			t.Errorf("%s (%q): %v; want a tokenapi.ErrBadRequest", c.Why, b, err)
		}
		if c.Valid {
			valid++
		}
	}
	t.Logf("%d cases (%d valid, %d refused)", len(cases), valid, len(cases)-valid)
}

// The white space the rule trims is Go's unicode.IsSpace, which the other
// clients spell out as a list: the list must be exactly that set.
func TestResourceWhiteSpaceList(t *testing.T) {
	var got []rune
	for r := rune(0); r <= unicode.MaxRune; r++ {
		if unicode.IsSpace(r) {
			got = append(got, r)
		}
	}
	if string(got) != tokenapi.ResourceSpaces {
		t.Fatalf("unicode.IsSpace holds %+q; tokenapi.ResourceSpaces is %+q", string(got), tokenapi.ResourceSpaces)
	}
	if strings.TrimSpace(tokenapi.ResourceSpaces) != "" {
		t.Fatal("ResourceSpaces holds a rune TrimSpace keeps")
	}
}
