package tokenservice_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"time"

	"github.com/fencegate/fencegate/raftstore"
	"github.com/fencegate/fencegate/tokenapi"
	"github.com/fencegate/fencegate/tokenclient"
	"github.com/fencegate/fencegate/tokenservice"
)

// Start a one-node token service and take two tokens from it. A real
// deployment runs three nodes with the same Peers on each, on fixed
// addresses; here the node takes listeners on free loopback ports.
func Example() {
	dir, err := os.MkdirTemp("", "fencegate-example-")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	raftLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	apiLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	srv, err := tokenservice.Start(context.Background(), tokenservice.Config{
		Config: raftstore.Config{
			ID:      "n1",
			DataDir: dir,
			Peers: []tokenapi.Peer{
				{ID: "n1", RaftAddr: raftLn.Addr().String(), APIAddr: "http://" + apiLn.Addr().String()},
			},
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		},
		RaftListener: raftLn, // the node owns both listeners from here on
		APIListener:  apiLn,
	})
	if err != nil {
		panic(err)
	}
	defer srv.Close()

	client, err := tokenclient.NewClient([]string{srv.APIURL()})
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
