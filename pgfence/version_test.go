package pgfence_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/pgfence"
)

func TestParseServerVersion(t *testing.T) {
	for _, c := range []struct {
		in   string
		num  int
		fail bool
	}{
		{"18.4", 180004, false},
		{"15.19 (Debian 15.19-0+deb12u1)", 150019, false},
		{"17beta1", 170000, false},
		{"19devel", 190000, false},
		{"13.23", 130023, false},
		{"9.6.24", 90624, false},
		{"", 0, true},
		{"x18", 0, true},
		{"(Debian)", 0, true},
	} {
		v, err := pgfence.ParseServerVersion(c.in)
		if c.fail {
			if err == nil {
				t.Errorf("ParseServerVersion(%q) = %+v, want an error", c.in, v)
			}
			continue
		}
		if err != nil || v.Num != c.num {
			t.Errorf("ParseServerVersion(%q) = %d, %v; want %d", c.in, v.Num, err, c.num)
		}
	}
}

// TestServerVersionCheck: the supported range, said once, decides; older
// majors are refused always, newer ones unless allowed, and the message
// names the server's version and the range.
func TestServerVersionCheck(t *testing.T) {
	for major := 9; major <= 20; major++ {
		v := pgfence.ServerVersion{Num: major*10000 + 3, Text: "x"}
		for _, allow := range []bool{false, true} {
			err := v.Check(allow)
			switch {
			case major < pgfence.MinMajor:
				if !errors.Is(err, pgfence.ErrUnsupportedServer) {
					t.Errorf("major %d allow=%v: %v, want ErrUnsupportedServer", major, allow, err)
				}
			case major > pgfence.MaxMajor && !allow:
				if !errors.Is(err, pgfence.ErrUntestedServer) {
					t.Errorf("major %d: %v, want ErrUntestedServer", major, err)
				}
			default:
				if err != nil {
					t.Errorf("major %d allow=%v: %v, want nil", major, allow, err)
				}
			}
			if err != nil && !strings.Contains(err.Error(), pgfence.SupportedRange) {
				t.Errorf("major %d: %q does not name the range", major, err)
			}
		}
	}
	if got, want := pgfence.SupportedRange, "PostgreSQL 14 to 18"; got != want {
		t.Errorf("SupportedRange = %q, want %q (README.md, docs/operations.md and scripts/pg-matrix.sh say so too)", got, want)
	}
}
