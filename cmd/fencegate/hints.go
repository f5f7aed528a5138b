package main

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/fencegate/fencegate/raftstore"
	"github.com/fencegate/fencegate/tokenapi"
	"github.com/fencegate/fencegate/tokenclient"
)

// The libraries say what is wrong in their own terms (Config.RaftAddr, the
// peers list, the data directory); this file says which flag of the
// command fixes it. Every error a token command reports goes through one
// of the hint functions below, which append the hint to the message and
// keep the error itself (errors.Is still sees its sentinels).

// flagOfField names the flag of 'fencegate token serve' that sets a field
// of tokenservice.Config or raftstore.Config, as a raftstore.FieldError
// names it.
var flagOfField = map[string]string{
	"ID":              "--id",
	"DataDir":         "--data-dir",
	"RaftAddr":        "--raft-addr",
	"APIAddr":         "--api-addr",
	"Peers":           "--peers",
	"Join":            "--join",
	"FoundingTimeout": "--founding-timeout",
	"ReserveSize":     "--reserve-size",
	"RoundTimeout":    "--round-timeout",
}

// hinted is an error with the hint the command adds to it.
type hinted struct {
	err  error
	hint string
}

func (h *hinted) Error() string { return h.err.Error() + "; " + h.hint }
func (h *hinted) Unwrap() error { return h.err }

func withHint(err error, format string, args ...any) error {
	return &hinted{err: err, hint: fmt.Sprintf(format, args...)}
}

// fieldFlags returns the flags that set the fields err is about, "" when
// it names none.
func fieldFlags(err error) string {
	var fe *raftstore.FieldError
	if !errors.As(err, &fe) {
		return ""
	}
	var flags []string
	for _, f := range fe.Fields {
		if fl, ok := flagOfField[f]; ok {
			flags = append(flags, fl)
		}
	}
	return strings.Join(flags, " and ")
}

// serveHint adds to a refused 'token serve' what the operator does about
// it: which flag to change, or how to replace the node.
func serveHint(err error, o *tokenServeOpts) error {
	if err == nil {
		return nil
	}
	admin := ""
	if o.tls.on() {
		admin = " with an admin's --tls-ca and --tls-cert/--tls-key or --credentials-file"
	}
	replace := fmt.Sprintf("to bring node %s back with an empty data dir: run 'fencegate token members remove %s'%s against the cluster, start this node again with the same flags plus --join API-URL-OF-A-MEMBER, then run 'fencegate token members add %s %s %s'%s (docs/operations.md: Replacing a node)",
		o.id, o.id, admin, o.id, o.raftAddr, o.apiAddr, admin)
	switch {
	case errors.Is(err, raftstore.ErrMustReplace), errors.Is(err, raftstore.ErrDataDirLost):
		return withHint(err, "%s", replace)
	case errors.Is(err, raftstore.ErrStillVoter):
		return withHint(err, "run 'fencegate token members remove %s' against the cluster first; this node then joins", o.id)
	case errors.Is(err, raftstore.ErrWaitTimeout) && o.join == "":
		return withHint(err, "start every node listed in --peers, or give --wait-for-founding to wait without limit; if the cluster already runs and this node lost its data, %s", replace)
	case errors.Is(err, raftstore.ErrWaitTimeout):
		return withHint(err, "check that --join names running members, or give --wait-for-founding to wait without limit")
	case errors.Is(err, raftstore.ErrNoFounding):
		return withHint(err, "give --peers to found a new cluster or --join to join a running one")
	}
	if flags := fieldFlags(err); flags != "" {
		return withHint(err, "set by %s", flags)
	}
	return err
}

// clientHint adds to an error of a token command that talks to the
// cluster (init, members, ...) which flag to check.
func clientHint(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, tokenclient.ErrNotRunning):
		return withHint(err, "check --servers")
	case errors.Is(err, tokenapi.ErrUnauthenticated), errors.Is(err, tokenapi.ErrForbidden):
		return withHint(err, "present an identity with the role the route needs: --tls-cert/--tls-key or --credentials-file")
	}
	return err
}

// membersAddHint is clientHint for 'token members add': a refused addition
// is most often a node that is not started yet, or not as a joining node.
func membersAddHint(err error) error {
	if errors.Is(err, tokenapi.ErrRefused) {
		return withHint(err, "the node to add runs first: 'fencegate token serve' with its own --id, an empty --data-dir and --join API-URL-OF-A-MEMBER")
	}
	return clientHint(err)
}

// Commands a message tells an administrator to run are pasted into a shell,
// and the names in them come from the database, where an application may
// have chosen them: a table may be called x$(touch /tmp/pwn). So every name
// a hint puts into a command is first quoted for SQL (as PostgreSQL reads a
// table name: pgx.Identifier, or format('%I') in SQL) and then for the
// shell, by shellQuote.

// shellQuote quotes s as one word for a POSIX shell: in single quotes, in
// which the shell expands nothing; a single quote in s ends the quoted
// part, is written escaped (\'), and a new quoted part begins.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// protectCommand is the command that protects table (as SQL names it:
// pgx.Identifier{schema, name}.Sanitize(), or a regclass printed by
// PostgreSQL) with resourceExpr, quoted for the shell.
func protectCommand(table, resourceExpr string) string {
	return "fencegate protect " + shellQuote(table) + " --resource " + shellQuote(resourceExpr) + " --db DSN"
}

// The dev stack (cmd/internal/devstack) names the configuration field that
// fixes a problem ("PersistentConfig.Postgres"), in its errors and in the
// source it describes a server by; settingFlags puts the flag of the
// command that fills the field in its place.

// settingFlags maps devstack configuration fields to one command's flags.
type settingFlags struct{ r *strings.Replacer }

func newSettingFlags(flagOf map[string]string) settingFlags {
	var pairs []string
	for field, flag := range flagOf {
		pairs = append(pairs, field, flag)
	}
	return settingFlags{r: strings.NewReplacer(pairs...)}
}

// devFlags are the flags of 'fencegate dev' (devstack.PersistentConfig).
var devFlags = newSettingFlags(map[string]string{
	"PersistentConfig.DataDir":     "--data-dir",
	"PersistentConfig.Postgres":    "--postgres",
	"PersistentConfig.Redis":       "--redis",
	"PersistentConfig.ProxyListen": "--proxy-listen",
	"PersistentConfig.TokenAPI":    "--token-api",
	"PersistentConfig.TokenRaft":   "--token-raft",
	"PersistentConfig.Database":    "--database",
	"PersistentConfig.OwnerRole":   "--owner-role",
	"PersistentConfig.AppRole":     "--app-role",
})

// demoFlags are the flags of the demos that start their own stack
// (devstack.ThrowawayConfig).
var demoFlags = newSettingFlags(map[string]string{
	"ThrowawayConfig.Postgres": "--postgres",
	"ThrowawayConfig.Redis":    "--redis",
})

// text is s with the fields it names replaced by their flags.
func (f settingFlags) text(s string) string { return f.r.Replace(s) }

// err is err with the fields its message names replaced by their flags;
// errors.Is and errors.As still see err.
func (f settingFlags) err(err error) error {
	if err == nil {
		return nil
	}
	msg := f.r.Replace(err.Error())
	if msg == err.Error() {
		return err
	}
	return &flagNamed{err: err, msg: msg}
}

// writer is w, with the fields written to it replaced by their flags.
func (f settingFlags) writer(w io.Writer) io.Writer { return &flagWriter{w: w, f: f} }

// flagNamed is an error whose message names flags instead of fields.
type flagNamed struct {
	err error
	msg string
}

func (e *flagNamed) Error() string { return e.msg }
func (e *flagNamed) Unwrap() error { return e.err }

// flagWriter replaces fields by flags in each Write (each a whole line or
// more: the demos write with fmt.Fprint*).
type flagWriter struct {
	w io.Writer
	f settingFlags
}

func (fw *flagWriter) Write(p []byte) (int, error) {
	if _, err := io.WriteString(fw.w, fw.f.text(string(p))); err != nil {
		return 0, err
	}
	return len(p), nil
}
