package main

import (
	"context"
	"errors"
	"os/exec"
	"strconv"
	"time"

	"github.com/fencegate/fencegate/internal/bench"
)

// errNoProxy means the fencegate binary has no proxy command.
var errNoProxy = errors.New("this fencegate build has no 'proxy' command; to measure the other paths run with --systems direct,pgbouncer --workloads select-simple,select-extended")

// startProxy starts "fencegate proxy" under g in front of up and returns
// its port once a query goes through it.
func startProxy(ctx context.Context, g *bench.Group, name, bin string, up pgbenchTarget, extra ...string) (int, error) {
	ports, err := bench.FreePorts(1)
	if err != nil {
		return 0, err
	}
	listen := "127.0.0.1:" + strconv.Itoa(ports[0])
	args := append([]string{"proxy", "--listen", listen, "--upstream", up.dsn()}, extra...)
	p, err := g.Start(name, exec.Command(bin, args...))
	if err != nil {
		return 0, err
	}
	target := up
	target.port = ports[0]
	if err := bench.WaitReady(ctx, p, 30*time.Second, sqlReady(target)); err != nil {
		return 0, err
	}
	return ports[0], nil
}

// fenceSQL is what the proxy sends upstream for a fence call.
const fenceSQL = "SET TRANSACTION READ WRITE; SELECT fencegate.fence($1, $2)"

// installSchema installs the fencegate schema in t's database.
func installSchema(ctx context.Context, t pgbenchTarget) error {
	return errNoProxy
}
