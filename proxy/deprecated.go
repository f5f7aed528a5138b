package proxy

import (
	"context"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/pgfence"
	"github.com/jackc/pgx/v5"
)

// FenceSQL is the statement a client sends to take a fence.
//
// Deprecated: use fencegate.FenceSQL. The proxy no longer rewrites the fence
// call, so it has no statement of its own; this alias goes once no caller
// is left.
const FenceSQL = fencegate.FenceSQL

// EnsureSchema installs or upgrades the fencegate schema in the database conn
// is connected to, with the default owner role and no application grants.
//
// Deprecated: use pgfence.Install, with the grants the application roles
// need. The proxy no longer installs the schema through client sessions;
// it installs it only through Config.AdminUpstream.
func EnsureSchema(ctx context.Context, conn *pgx.Conn) error {
	_, err := pgfence.Install(ctx, conn, pgfence.InstallOptions{})
	return err
}
