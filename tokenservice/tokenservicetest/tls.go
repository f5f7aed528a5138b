package tokenservicetest

import (
	"github.com/fencegate/fencegate/tokenclient"
	"github.com/fencegate/fencegate/tokenservice"
)

// WithTLS runs every node with TLS: node(id) returns the TLS material of
// the node named id ("n1", "n2", ...), a CA and a certificate that names
// the node (CN = id, OU = peer) and 127.0.0.1. Raft and the links between
// nodes then use mutual TLS, and the API is served over HTTPS and
// authenticates its callers, accepting creds as bearer credentials (nil:
// certificates only). The membership helpers (AddNode, AddMember, Remove,
// Replace, WaitVoter) use the client options admin, which carry an admin
// certificate of the CA; clients need TLS options of their own
// (tokenclient.WithTLS). The default is plain HTTP and TCP.
func WithTLS(node func(id string) *tokenservice.NodeTLS, creds *tokenservice.Credentials, admin ...tokenclient.ClientOption) Option {
	return func(o *options) {
		o.tls, o.admin = true, admin
		o.configure = append(o.configure, func(_ int, cfg *tokenservice.Config) {
			cfg.TLS = node(cfg.ID)
			cfg.Credentials = creds
		})
	}
}

func (c *Cluster) scheme() string {
	if c.opts.tls {
		return "https://"
	}
	return "http://"
}
