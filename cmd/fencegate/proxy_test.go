package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

func TestProxyCommandLine(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"proxy", "--help"}, 0, "allow-unfenced-writes"},
		{[]string{"proxy", "--bogus"}, 2, "flag provided but not defined"},
		{[]string{"proxy", "extra"}, 2, "unexpected argument"},
		{[]string{"proxy", "--tls-cert", "c.pem"}, 2, "--tls-cert and --tls-key go together"},
		{[]string{"proxy", "--require-client-tls"}, 2, "needs --tls-cert"},
		{[]string{"proxy", "--upstream", "mysql://x:1"}, 2, "scheme must be postgres://"},
		{[]string{"proxy", "--upstream", "postgres://127.0.0.1:5432?sslmode=maybe"}, 2, "unknown sslmode"},
	} {
		var out, errb bytes.Buffer
		code := run(context.Background(), tc.args, &out, &errb)
		if code != tc.code || !strings.Contains(errb.String()+out.String(), tc.want) {
			t.Errorf("fencegate %v: exit %d, want %d with %q; stderr:\n%s", tc.args, code, tc.code, tc.want, errb.String())
		}
	}
}
