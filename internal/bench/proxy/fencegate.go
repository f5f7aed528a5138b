package main

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fencegate/fencegate/internal/bench"
	"github.com/fencegate/fencegate/proxy"
)

// errNoProxy means the fencegate binary has no proxy command.
var errNoProxy = errors.New("this fencegate binary has no 'proxy' command; build one that has, or run with --systems direct,pgbouncer to measure the other paths")

// startProxy starts "fencegate proxy" under g in front of up and returns
// its port and process id once a query goes through it.
func startProxy(ctx context.Context, g *bench.Group, name, bin string, up pgbenchTarget, extra ...string) (port, pid int, err error) {
	ports, err := bench.FreePorts(1)
	if err != nil {
		return 0, 0, err
	}
	listen := "127.0.0.1:" + strconv.Itoa(ports[0])
	args := append([]string{"proxy", "--listen", listen, "--upstream", up.dsn()}, extra...)
	p, err := g.Start(name, exec.Command(bin, args...))
	if err != nil {
		return 0, 0, err
	}
	target := up
	target.port = ports[0]
	if err := bench.WaitReady(ctx, p, 30*time.Second, sqlReady(target)); err != nil {
		return 0, 0, err
	}
	return ports[0], p.Pid(), nil
}

// fenceSQL is what the proxy sends upstream for a fence call.
const fenceSQL = proxy.FenceSQL

// installSchema installs the fencegate schema in t's database, as the proxy
// does on its first session, so that the direct twins find the function.
func installSchema(ctx context.Context, t pgbenchTarget) error {
	conn, err := pgx.Connect(ctx, t.dsn())
	if err != nil {
		return fmt.Errorf("install fencegate schema: %w", err)
	}
	defer conn.Close(context.Background())
	return proxy.EnsureSchema(ctx, conn)
}
