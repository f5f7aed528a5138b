package main

import (
	"context"
	"flag"
	"time"

	"github.com/fencegate/fencegate/tokenclient"
)

// defaultServers are the API addresses of the local development cluster.
const defaultServers = "http://127.0.0.1:7101,http://127.0.0.1:7102,http://127.0.0.1:7103"

// clientOpts are the flags every client subcommand of 'fencegate token'
// shares: which nodes to ask, how long to keep trying, and the TLS and
// credential flags (the same four on every subcommand, serve included).
type clientOpts struct {
	servers string
	timeout time.Duration
	tls     *tlsFlags
}

// addClientFlags defines the flags every client subcommand shares, with
// the subcommand's own default timeout.
func addClientFlags(fs *flag.FlagSet, timeout time.Duration) *clientOpts {
	o := &clientOpts{}
	fs.StringVar(&o.servers, "servers", defaultServers, "comma-separated API URLs (or HOST:PORT) of the token service nodes")
	fs.DurationVar(&o.timeout, "timeout", timeout, "give up after this long")
	o.tls = addTLSFlags(fs)
	return o
}

// client returns a client for the nodes the flags name, with their TLS
// and credential flags.
func (o *clientOpts) client() (*tokenclient.Client, error) {
	return newClient(o.servers, o.timeout, o.tls)
}

// session returns a client for the nodes the flags name and ctx bounded
// by --timeout; done closes the client and releases the context.
func (o *clientOpts) session(ctx context.Context) (c *tokenclient.Client, sctx context.Context, done func(), err error) {
	c, err = o.client()
	if err != nil {
		return nil, nil, nil, err
	}
	sctx, cancel := context.WithTimeout(ctx, o.timeout)
	return c, sctx, func() { cancel(); c.Close() }, nil
}

// newClient returns a client of the nodes in servers with the TLS and
// credential flags tf, checking every file now.
func newClient(servers string, timeout time.Duration, tf *tlsFlags) (*tokenclient.Client, error) {
	opts, err := tf.clientOptions()
	if err != nil {
		return nil, err
	}
	c, err := tokenclient.NewClient(tf.servers(servers), append(opts, tokenclient.WithMaxWait(timeout))...)
	if err != nil {
		return nil, usagef("--servers: %v", err)
	}
	return c, nil
}
