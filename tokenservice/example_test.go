package tokenservice_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/fencegate/fencegate/internal/freeport"
	"github.com/fencegate/fencegate/raftstore"
	"github.com/fencegate/fencegate/tokenservice"
)

// freeAddr returns a loopback address that was free a moment ago, never
// the same one twice.
func freeAddr() string {
	addrs, err := freeport.Loopback(1)
	if err != nil {
		panic(err)
	}
	return addrs[0]
}

// Start a one-node token service and take two tokens from it. A real
// deployment runs three nodes with the same Peers on each.
func Example() {
	dir, err := os.MkdirTemp("", "fencegate-example-")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	raftAddr, apiAddr := freeAddr(), freeAddr()
	srv, err := tokenservice.Start(context.Background(), tokenservice.Config{
		Config: raftstore.Config{
			ID:       "n1",
			DataDir:  dir,
			RaftAddr: raftAddr,
			APIAddr:  apiAddr,
			Peers:    []tokenservice.Peer{{ID: "n1", RaftAddr: raftAddr, APIAddr: apiAddr}},
			Logger:   slog.New(slog.NewTextHandler(io.Discard, nil)),
		},
	})
	if err != nil {
		panic(err)
	}
	defer srv.Close()

	client, err := tokenservice.NewClient([]string{srv.APIURL()})
	if err != nil {
		panic(err)
	}
	defer client.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	first, err := client.NextToken(ctx, "orders/42") // retries until the node has elected itself
	if err != nil {
		panic(err)
	}
	second, err := client.Next(ctx, "orders/42")
	if err != nil {
		panic(err)
	}
	fmt.Println(first, second.Value, second.Value > first)
	// Output: 1 2 true
}

func ExampleParsePeers() {
	peers, err := tokenservice.ParsePeers("n1=127.0.0.1:7201=http://127.0.0.1:7101,n2=127.0.0.1:7202=127.0.0.1:7102")
	if err != nil {
		panic(err)
	}
	for _, p := range peers {
		fmt.Println(p.ID, p.RaftAddr, p.APIAddr)
	}
	// Output:
	// n1 127.0.0.1:7201 http://127.0.0.1:7101
	// n2 127.0.0.1:7202 http://127.0.0.1:7102
}
