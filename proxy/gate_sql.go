package proxy

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/fencegate/fencegate/pgfence"
	"github.com/jackc/pgx/v5"
)

// The gate's statements, from package pgfence.
var (
	privilegeQuery = pgfence.PrivilegeQuery
	healthQuery    = pgfence.HealthQuery
)

// errOrphans: schema fencegate is missing while tables still carry the
// column protect() adds: it was dropped, with its marks.
var errOrphans = errors.New("schema fencegate is missing, but tables still carry its resource column, so it was dropped with every mark it held")

// install installs or repairs the schema through an admin connection,
// owned by owner (empty: pgfence's default, the current owner when it is a
// usable one). It does not install from nothing over tables that were
// protected before: reinstalling would leave them unprotected and accept
// every old token again.
func install(ctx context.Context, conn *pgx.Conn, owner string) (*pgfence.Report, error) {
	var orphans []string
	err := conn.QueryRow(ctx, `SELECT CASE WHEN pg_catalog.to_regnamespace('fencegate') IS NULL THEN ARRAY(
			SELECT pg_catalog.format('%I.%I', n.nspname, c.relname) FROM pg_catalog.pg_attribute a
			JOIN pg_catalog.pg_class c ON c.oid = a.attrelid JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
			WHERE a.attname = 'fencegate_resource' AND NOT a.attisdropped AND a.attnum > 0 AND c.relkind IN ('r', 'p')
			ORDER BY 1) END`).Scan(&orphans)
	if err != nil {
		return nil, fmt.Errorf("read the state of schema fencegate: %w", err)
	}
	if len(orphans) > 0 {
		return nil, fmt.Errorf("%w (%s): an administrator decides: reinstall (fencegate schema install), then protect those tables again", errOrphans, strings.Join(orphans, ", "))
	}
	return pgfence.Install(ctx, conn, pgfence.InstallOptions{OwnerRole: owner})
}
