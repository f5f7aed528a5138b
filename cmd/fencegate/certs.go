package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/fencegate/fencegate/internal/pki"
	"github.com/fencegate/fencegate/tokenapi"
	"github.com/fencegate/fencegate/tokenclient"
)

// listFlag is a flag that may be given several times.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, " ") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

// runTokenCerts makes a cluster CA (or reuses the one in --out) and the
// certificates of nodes, clients and admins, in the role convention the
// token service reads: OU = role, CN = name (the node ID for a node), and,
// with --cluster, the URI fencegate://cluster/NAME.
func runTokenCerts(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("fencegate token certs", flag.ContinueOnError)
	out := fs.String("out", "fencegate-certs", "`DIR` to write ca.pem, ca-key.pem and the certificates to; an existing ca.pem and ca-key.pem there are reused to issue more (files are never overwritten)")
	var nodes, clients, admins listFlag
	fs.Var(&nodes, "node", "a node as `ID=HOST[,HOST...]`: its certificate gets OU=peer, CN=ID and each HOST (the IP addresses and DNS names its --raft-addr and --api-addr use); repeat for each node")
	fs.Var(&clients, "client", "a client certificate (OU=client, CN=`NAME`); repeatable")
	fs.Var(&admins, "admin", "an admin certificate (OU=admin, CN=`NAME`); repeatable")
	cluster := fs.String("cluster", "", "`NAME` of the cluster the certificates belong to, written into each as the URI fencegate://cluster/NAME; a node accepts peers only of its own certificate's cluster, and clients of it or of none (default: no name, as earlier versions issued; nodes whose certificates name no cluster accept only such peers)")
	days := fs.Int("days", 825, "validity of the certificates, in days")
	caDays := fs.Int("ca-days", 3650, "validity of a new CA, in days")
	err := parseFlagsOnly(fs, args, stderr, "certs")
	if err != nil {
		return err
	}
	if len(nodes)+len(clients)+len(admins) == 0 {
		return usagef("nothing to issue; give --node ID=HOST for each node (e.g. --node n1=10.0.0.1 --node n2=10.0.0.2 --node n3=10.0.0.3) and --client/--admin NAME")
	}
	if *days < 1 || *caDays < 1 {
		return usagef("--days and --ca-days must be at least 1")
	}
	if *cluster != "" {
		if _, err := pki.ClusterURI(*cluster); err != nil {
			return usagef("--cluster %q: use letters, digits, '.', '_' or '-' (at most 64, starting with a letter or digit)", *cluster)
		}
	}
	type job struct {
		file, name string
		roles      []string
		hosts      []string
	}
	var jobs []job
	seen := map[string]bool{}
	add := func(j job) error {
		if seen[j.file] {
			return usagef("%s is asked for twice; name each certificate once", j.file)
		}
		seen[j.file] = true
		jobs = append(jobs, j)
		return nil
	}
	for _, n := range nodes {
		id, hostList, ok := strings.Cut(n, "=")
		if !ok || !validName(id) || hostList == "" {
			return usagef("--node %q is not ID=HOST[,HOST...] (e.g. n1=10.0.0.1,n1.example.com)", n)
		}
		var hosts []string
		for _, h := range strings.Split(hostList, ",") {
			if h = strings.TrimSpace(h); h == "" || net.ParseIP(h) == nil && strings.ContainsAny(h, ":/ ") {
				return usagef("--node %q: host %q is not an IP address or DNS name (leave out ports and schemes)", n, h)
			}
			hosts = append(hosts, h)
		}
		if err := add(job{file: id, name: id, roles: []string{string(tokenapi.RolePeer)}, hosts: hosts}); err != nil {
			return err
		}
	}
	for _, group := range []struct {
		names listFlag
		role  tokenapi.Role
	}{{clients, tokenapi.RoleClient}, {admins, tokenapi.RoleAdmin}} {
		for _, name := range group.names {
			if !validName(name) {
				return usagef("--%s %q: use letters, digits, '.', '_' or '-'", group.role, name)
			}
			if err := add(job{file: string(group.role) + "-" + name, name: name, roles: []string{string(group.role)}}); err != nil {
				return err
			}
		}
	}

	if err := os.MkdirAll(*out, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", *out, err)
	}
	// Check every target first, so a refused run writes nothing.
	for _, j := range jobs {
		for _, f := range []string{j.file + ".pem", j.file + "-key.pem"} {
			if _, err := os.Stat(filepath.Join(*out, f)); err == nil {
				return fmt.Errorf("%s already exists; remove it or choose another --out (files are never overwritten)", filepath.Join(*out, f))
			}
		}
	}
	caCert, caKey := filepath.Join(*out, "ca.pem"), filepath.Join(*out, "ca-key.pem")
	var ca *pki.CA
	_, errCert := os.Stat(caCert)
	_, errKey := os.Stat(caKey)
	switch {
	case errCert == nil && errKey == nil:
		if ca, err = pki.LoadCA(caCert, caKey); err != nil {
			return fmt.Errorf("%v; give --out a directory with this cluster's ca.pem and ca-key.pem, or an empty one", err)
		}
		fmt.Fprintf(stdout, "reusing the CA in %s\n", caCert)
	case errCert == nil || errKey == nil:
		return fmt.Errorf("%s holds only one of ca.pem and ca-key.pem; restore the other or choose another --out", *out)
	default:
		if ca, err = pki.NewCA("fencegate cluster CA", pki.Options{Validity: time.Duration(*caDays) * 24 * time.Hour}); err != nil {
			return err
		}
		if _, _, err := ca.Write(*out, "ca"); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "wrote %s (give to every node and client) and %s (keep it offline: it signs new certificates)\n", caCert, caKey)
	}
	for _, j := range jobs {
		leaf, err := ca.Issue(j.name, j.roles, j.hosts, pki.Options{Validity: time.Duration(*days) * 24 * time.Hour, Cluster: *cluster})
		if err != nil {
			return err
		}
		cf, kf, err := leaf.Write(*out, j.file)
		if errors.Is(err, pki.ErrExists) {
			return fmt.Errorf("%v; remove it or choose another --out", err)
		}
		if err != nil {
			return err
		}
		what := fmt.Sprintf("%s %s", j.roles[0], j.name)
		if len(j.hosts) > 0 {
			what += " for " + strings.Join(j.hosts, ", ")
		}
		if *cluster != "" {
			what += " of cluster " + *cluster
		}
		fmt.Fprintf(stdout, "wrote %s and %s (%s)\n", cf, kf, what)
	}
	return nil
}

// runTokenCredential makes a bearer credential: the client's file (the
// secret, mode 0600) and, on stdout, the line for the nodes' credentials
// file (the secret's hash).
func runTokenCredential(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("fencegate token credential", flag.ContinueOnError)
	name := fs.String("name", "", "the credential's `NAME` (required; no default)")
	role := fs.String("role", "client", "`ROLES` it grants: client, admin or client,admin")
	out := fs.String("out", "", "`FILE` to write the client's NAME SECRET line to, mode 0600 (required; no default); the node line is printed")
	err := parseFlagsOnly(fs, args, stderr, "credential")
	if err != nil {
		return err
	}
	if *name == "" || *out == "" {
		return usagef("--name and --out are required, e.g. --name app --role client --out app.credential")
	}
	var roles []tokenapi.Role
	for _, r := range strings.Split(*role, ",") {
		switch tokenapi.Role(r) {
		case tokenapi.RoleClient, tokenapi.RoleAdmin:
			roles = append(roles, tokenapi.Role(r))
		default:
			return usagef("--role %q: use client, admin or client,admin (nodes identify by certificate, never by credential)", r)
		}
	}
	cred, err := tokenclient.NewClientCredential(*name)
	if err != nil {
		return usagef("--name: %v", err)
	}
	if err := pki.WriteNew(*out, []byte("# fencegate bearer credential; keep it secret\n"+cred.FileLine()+"\n"), 0o600); err != nil {
		if errors.Is(err, pki.ErrExists) {
			return fmt.Errorf("%s already exists; remove it or choose another --out", *out)
		}
		return err
	}
	fmt.Fprintf(stderr, "wrote %s (the client's secret; pass it with --credentials-file). Add this line to each node's credentials file:\n", *out)
	fmt.Fprintln(stdout, cred.ServerLine(roles...))
	return nil
}

func validName(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-') {
			return false
		}
	}
	return true
}
