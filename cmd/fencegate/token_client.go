package main

import (
	"flag"
	"time"

	"github.com/fencegate/fencegate/tokenservice"
)

// defaultServers are the API addresses of the local development cluster.
const defaultServers = "http://127.0.0.1:7101,http://127.0.0.1:7102,http://127.0.0.1:7103"

// clientOpts are the flags every client subcommand of 'fencegate token'
// shares: which nodes to ask and how long to keep trying.
type clientOpts struct {
	servers string
	timeout time.Duration
}

// addClientFlags defines the flags every client subcommand shares, with
// the subcommand's own default timeout.
func addClientFlags(fs *flag.FlagSet, timeout time.Duration) *clientOpts {
	o := &clientOpts{}
	fs.StringVar(&o.servers, "servers", defaultServers, "comma-separated API URLs (or HOST:PORT) of the token service nodes")
	fs.DurationVar(&o.timeout, "timeout", timeout, "give up after this long")
	return o
}

// client returns a client for the nodes the flags name.
func (o *clientOpts) client() (*tokenservice.Client, error) {
	c, err := tokenservice.NewClient(splitList(o.servers), tokenservice.WithMaxWait(o.timeout))
	if err != nil {
		return nil, usagef("--servers: %v", err)
	}
	return c, nil
}
