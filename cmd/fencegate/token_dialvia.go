package main

import (
	"context"
	"fmt"
	"net"
	"strings"
)

// dialVia returns the dial function of a token node whose connections to
// some addresses must go through others (the fault harness puts a relay it
// can cut between each pair of nodes). spec is ADDR=VIA,...; an address not
// in spec is dialled directly. An empty spec returns nil: the default dial.
func dialVia(spec string) (func(ctx context.Context, network, addr string) (net.Conn, error), error) {
	if strings.TrimSpace(spec) == "" {
		return nil, nil
	}
	via := map[string]string{}
	for _, pair := range strings.Split(spec, ",") {
		addr, to, ok := strings.Cut(strings.TrimSpace(pair), "=")
		if !ok || addr == "" || to == "" {
			return nil, fmt.Errorf("%q is not ADDR=VIA (e.g. 127.0.0.1:7202=127.0.0.1:17202)", pair)
		}
		via[addr] = to
	}
	var d net.Dialer
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		if to, ok := via[addr]; ok {
			addr = to
		}
		return d.DialContext(ctx, network, addr)
	}, nil
}
