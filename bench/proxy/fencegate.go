package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/fencegate/fencegate/internal/freeport"
	"github.com/fencegate/fencegate/internal/pgdb"
	"github.com/fencegate/fencegate/internal/proc"
	"github.com/jackc/pgx/v5"

	"github.com/fencegate/fencegate/pgfence"
)

// errNoProxy means the fencegate binary has no proxy command.
var errNoProxy = errors.New("this fencegate binary has no 'proxy' command; build one that has, or run with --systems direct,pgbouncer to measure the other paths")

// startProxy starts "fencegate proxy" under g in front of up and returns
// its port and process id once a query goes through it.
func startProxy(ctx context.Context, g *proc.Group, name, bin string, up pgbenchTarget, extra ...string) (port, pid int, err error) {
	ports, err := freeport.Ports(1)
	if err != nil {
		return 0, 0, err
	}
	listen := "127.0.0.1:" + strconv.Itoa(ports[0])
	args := append([]string{"proxy", "--listen", listen, "--upstream", up.dsn()}, extra...)
	p, err := g.Start(name, bin, args)
	if err != nil {
		return 0, 0, err
	}
	target := up
	target.port = ports[0]
	if err := p.WaitReady(ctx, 20*time.Millisecond, 30*time.Second, sqlReady(target)); err != nil {
		return 0, 0, err
	}
	return ports[0], p.Pid(), nil
}

// appRole is the application role pgbench connects as on every path: the
// gate refuses the administrator (a superuser could switch enforcement
// off), and a fair comparison runs every path as the same role.
type appRole struct {
	name, owner string
}

// prepareDatabase does the administrator's part in t's database (t.user is
// the administrator): it installs schema fencegate with its own owner role,
// creates an application role with the grants an application needs (the
// fence functions, and SELECT, INSERT, UPDATE, DELETE on the pgbench tables),
// and, for the fenced workloads, creates the protected table fencedTable
// with the accounts of clients 0..maxClients-1 (see fencedScript), whose
// row with aid X belongs to resource "acct:X".
func prepareDatabase(ctx context.Context, t pgbenchTarget, r appRole, maxClients int, fenced bool) error {
	conn, err := pgx.Connect(ctx, t.dsn())
	if err != nil {
		return fmt.Errorf("prepare database %s: %w", t.db, err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "CREATE ROLE "+r.name+" LOGIN"); err != nil {
		return fmt.Errorf("create the application role: %w", err)
	}
	if _, err := pgfence.Install(ctx, conn, pgfence.InstallOptions{OwnerRole: r.owner, Grant: []string{r.name}}); err != nil {
		return fmt.Errorf("install fencegate schema: %w", err)
	}
	if fenced {
		if _, err := conn.Exec(ctx, fmt.Sprintf(`CREATE TABLE %[1]s (aid int PRIMARY KEY, abalance int NOT NULL);
INSERT INTO %[1]s SELECT aid, abalance FROM pgbench_accounts WHERE aid <= %[2]d`, fencedTable, 100*maxClients+100)); err != nil {
			return fmt.Errorf("create %s: %w", fencedTable, err)
		}
		if err := pgfence.Protect(ctx, conn, fencedTable, "'acct:' || aid"); err != nil {
			return fmt.Errorf("protect %s: %w", fencedTable, err)
		}
		if _, err := conn.Exec(ctx, "VACUUM ANALYZE "+fencedTable); err != nil {
			return err
		}
	}
	if _, err := conn.Exec(ctx, "GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO "+r.name); err != nil {
		return fmt.Errorf("grant the pgbench tables: %w", err)
	}
	return nil
}

// newAppRole names the run's application role and schema owner role.
func newAppRole() appRole {
	id := pgdb.RandomHex(5)
	return appRole{name: "fg_bench_app_" + id, owner: "fg_bench_owner_" + id}
}

// drop drops the roles, once the database that used them is gone.
func (r appRole) drop(adminDSN string) error {
	return pgdb.DropRoles(context.Background(), adminDSN, nil, r.name, r.owner)
}
