package main

import (
	"bytes"
	"context"
	"flag"
	"path/filepath"
	"strings"
	"testing"
)

// Every token subcommand that talks to the cluster takes the same TLS and
// credential flags, spelt and explained the same way; serve takes them
// too.
func TestTokenSubcommandsShareTLSFlags(t *testing.T) {
	subs := map[string]func(fs *flag.FlagSet){
		"serve":          func(fs *flag.FlagSet) { tokenServeFlags(fs) },
		"next":           func(fs *flag.FlagSet) { tokenNextFlags(fs) },
		"status":         func(fs *flag.FlagSet) { tokenStatusFlags(fs) },
		"members list":   func(fs *flag.FlagSet) { membersListFlags(fs) },
		"members add":    func(fs *flag.FlagSet) { membersAddFlags(fs) },
		"members remove": func(fs *flag.FlagSet) { membersRemoveFlags(fs) },
		"snapshot":       func(fs *flag.FlagSet) { tokenSnapshotFlags(fs) },
		"restore":        func(fs *flag.FlagSet) { tokenRestoreFlags(fs) },
		"init":           func(fs *flag.FlagSet) { tokenInitFlags(fs) },
	}
	usage := map[string]string{}
	for name, define := range subs {
		fs := flag.NewFlagSet(name, flag.ContinueOnError)
		define(fs)
		for _, f := range []string{"tls-ca", "tls-cert", "tls-key", "credentials-file"} {
			fl := fs.Lookup(f)
			if fl == nil {
				t.Errorf("token %s has no --%s", name, f)
				continue
			}
			if u, ok := usage[f]; ok && u != fl.Usage {
				t.Errorf("token %s explains --%s differently:\n %q\n %q", name, f, fl.Usage, u)
			}
			usage[f] = fl.Usage
		}
	}
}

// The membership, snapshot and restore commands check their TLS and
// credential files before they ask anything, with one line naming the
// file, and refuse an incomplete set of flags as a usage error.
func TestTokenAdminCommandsCheckTLSFiles(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "ca.pem")
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"token", "members", "list", "--tls-ca", missing}, 1, missing},
		{[]string{"token", "members", "remove", "n2", "--tls-ca", missing}, 1, missing},
		{[]string{"token", "members", "add", "n4", "127.0.0.1:7204", "127.0.0.1:7104", "--tls-ca", missing}, 1, missing},
		{[]string{"token", "snapshot", "--out", "-", "--tls-ca", missing}, 1, missing},
		{[]string{"token", "members", "list", "--tls-cert", "admin.pem"}, 2, "--tls-cert and --tls-key go together"},
		{[]string{"token", "snapshot", "--out", "-", "--tls-cert", "a.pem", "--tls-key", "a-key.pem"}, 2, "--tls-cert needs --tls-ca"},
		{[]string{"token", "members", "list", "--credentials-file", missing}, 1, missing},
	} {
		t.Run(strings.Join(tc.args[1:3], " "), func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run(context.Background(), tc.args, &stdout, &stderr)
			lines := strings.Split(strings.TrimRight(stderr.String(), "\n"), "\n")
			if code != tc.code || stdout.Len() != 0 || len(lines) != 1 || !strings.Contains(lines[0], tc.want) {
				t.Fatalf("%v: exit %d (want %d), stdout %q, stderr %q; want one line naming %q", tc.args, code, tc.code, stdout.String(), stderr.String(), tc.want)
			}
		})
	}
}
