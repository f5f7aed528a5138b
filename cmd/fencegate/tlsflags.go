package main

import (
	"flag"
	"strings"

	"github.com/fencegate/fencegate/tokenclient"
	"github.com/fencegate/fencegate/tokenservice"
)

// tlsFlags are the TLS and credential flags of every token subcommand:
// the same four names and meanings on serve, next, status and the others.
type tlsFlags struct {
	ca, cert, key, creds string
	prefix               string // of the flag names: "" for the token subcommands, "token-" elsewhere
}

// name returns the flag called name, as the user typed it.
func (f *tlsFlags) name(name string) string { return "--" + f.prefix + name }

// addTokenTLSFlags adds the client half of the TLS and credential flags,
// each name prefixed with "token-" (--token-tls-ca, --token-tls-cert,
// --token-tls-key, --token-credentials-file), to a command that has TLS
// flags of its own and talks to the token service on the side.
func addTokenTLSFlags(fs *flag.FlagSet) *tlsFlags {
	f := &tlsFlags{prefix: "token-"}
	fs.StringVar(&f.ca, "token-tls-ca", "", "PEM `FILE` of the token cluster's CA; turns TLS to the token service on (default empty: plain HTTP, for loopback only)")
	fs.StringVar(&f.cert, "token-tls-cert", "", "PEM client certificate `FILE` for the token service (OU=client or admin) (default empty)")
	fs.StringVar(&f.key, "token-tls-key", "", "PEM private key `FILE` of --token-tls-cert (default empty)")
	fs.StringVar(&f.creds, "token-credentials-file", "", "bearer credential `FILE` for the token service: its NAME SECRET line (default empty: none)")
	return f
}

// addTLSFlags adds --tls-ca, --tls-cert, --tls-key and --credentials-file
// to fs.
func addTLSFlags(fs *flag.FlagSet) *tlsFlags {
	f := &tlsFlags{}
	fs.StringVar(&f.ca, "tls-ca", "", "PEM `FILE` of the cluster CA; turns TLS on (default empty: plain HTTP, for loopback only)")
	fs.StringVar(&f.cert, "tls-cert", "", "PEM certificate `FILE`: a node's own for serve (OU=peer, CN=its --id), a client's otherwise (OU=client or admin) (default empty)")
	fs.StringVar(&f.key, "tls-key", "", "PEM private key `FILE` of --tls-cert (default empty)")
	fs.StringVar(&f.creds, "credentials-file", "", "bearer credentials `FILE`: for serve, the NAME ROLES sha256:HASH lines it accepts; for a client, its NAME SECRET line (default empty: none)")
	return f
}

// on reports whether TLS was asked for.
func (f *tlsFlags) on() bool { return f.ca != "" || f.cert != "" || f.key != "" }

// node loads a node's TLS material and credentials, checking every file
// now. Without any TLS flag it returns nil, nil: plain HTTP.
func (f *tlsFlags) node() (*tokenservice.NodeTLS, *tokenservice.Credentials, error) {
	if !f.on() {
		if f.creds != "" {
			return nil, nil, usagef("--credentials-file needs TLS: add --tls-ca, --tls-cert and --tls-key (bearer secrets must not cross the network in clear)")
		}
		return nil, nil, nil
	}
	if f.ca == "" || f.cert == "" || f.key == "" {
		return nil, nil, usagef("--tls-ca, --tls-cert and --tls-key go together: a node needs the cluster CA, its own certificate and its key")
	}
	nt, err := tokenservice.LoadNodeTLS(f.ca, f.cert, f.key)
	if err != nil {
		return nil, nil, err
	}
	var creds *tokenservice.Credentials
	if f.creds != "" {
		if creds, err = tokenservice.LoadCredentials(f.creds); err != nil {
			return nil, nil, err
		}
	}
	return nt, creds, nil
}

// clientOptions loads a client's TLS configuration and credential, checking
// every file now.
func (f *tlsFlags) clientOptions() ([]tokenclient.ClientOption, error) {
	var opts []tokenclient.ClientOption
	if (f.cert == "") != (f.key == "") {
		return nil, usagef("%s and %s go together", f.name("tls-cert"), f.name("tls-key"))
	}
	if f.cert != "" && f.ca == "" {
		return nil, usagef("%s needs %s, the cluster CA that verifies the nodes", f.name("tls-cert"), f.name("tls-ca"))
	}
	if f.ca != "" {
		cfg, err := tokenclient.LoadClientTLS(f.ca, f.cert, f.key)
		if err != nil {
			return nil, err
		}
		opts = append(opts, tokenclient.WithTLS(cfg))
	}
	if f.creds != "" {
		cred, err := tokenclient.LoadClientCredential(f.creds)
		if err != nil {
			return nil, err
		}
		opts = append(opts, tokenclient.WithCredential(cred))
	}
	return opts, nil
}

// servers turns a --servers value into URLs; with TLS the loopback
// defaults become https.
func (f *tlsFlags) servers(list string) []string {
	if f.ca != "" && list == defaultServers {
		list = strings.ReplaceAll(list, "http://", "https://")
	}
	return splitList(list)
}
