package devstack

import "github.com/fencegate/fencegate/internal/devstack/servers"

// Redact hides a DSN's password (servers.Redact).
func Redact(dsn string) string { return servers.Redact(dsn) }

// Older names of what package servers provides.
var (
	// Deprecated: use servers.PingPostgres.
	PingPostgres = servers.PingPostgres
	// Deprecated: use servers.PingRedis.
	PingRedis = servers.PingRedis
	// Deprecated: use servers.StartMasters.
	StartMasters = servers.StartMasters
	// Deprecated: use servers.StartTokens.
	StartTokens = servers.StartTokens
)

// Deprecated: use servers.TokenOptions.
type TokenOptions = servers.TokenOptions
