package proxy

import (
	"strings"
	"testing"
)

// TestCheckServerVersion: the gate admits the supported majors, refuses an
// older one always and a newer one unless Config.AllowNewerServer, each
// with FG005 and a message naming the server's version and the range. An
// upstream that reported no server_version is left to the health query.
func TestCheckServerVersion(t *testing.T) {
	for _, c := range []struct {
		version    string
		allowNewer bool
		refused    string // in the message; "" admitted
	}{
		{"14.23", false, ""},
		{"15.19 (Debian 15.19-0+deb12u1)", false, ""},
		{"18.4", false, ""},
		{"", false, ""},
		{"13.23", false, "the server runs PostgreSQL 13.23; fencegate supports PostgreSQL 14 to 18"},
		{"13.23", true, "the server runs PostgreSQL 13.23"},
		{"19devel", false, "the server runs PostgreSQL 19devel, newer than fencegate is tested on (PostgreSQL 14 to 18)"},
		{"19.1", true, ""},
		{"garbage", false, "does not start with a major version"},
	} {
		s := &session{p: &Proxy{cfg: Config{AllowNewerServer: c.allowNewer}}, params: map[string]string{"server_version": c.version}}
		r := s.checkServerVersion()
		switch {
		case c.refused == "" && r != nil:
			t.Errorf("%q allowNewer=%v: refused: %v", c.version, c.allowNewer, r)
		case c.refused != "" && r == nil:
			t.Errorf("%q allowNewer=%v: admitted, want refused", c.version, c.allowNewer)
		case r != nil && (r.code != "FG005" || r.reason != "server_version" || !strings.Contains(r.msg, c.refused)):
			t.Errorf("%q allowNewer=%v: %s %s %q, want FG005 server_version %q", c.version, c.allowNewer, r.code, r.reason, r.msg, c.refused)
		case r != nil && strings.HasPrefix(c.version, "19") != strings.Contains(r.hint, "--allow-newer-postgres"):
			t.Errorf("%q: hint %q", c.version, r.hint)
		}
	}
}
