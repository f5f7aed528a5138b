package lockclient

import (
	"context"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/jackc/pgx/v5"
)

// TestPeekBesideParkedReader: the look for a session ended before COMMIT
// must not wait for a reader parked on the socket. pgx parks one there
// (its background reader) after a slow write, and it stays until the
// server sends something; inside a transaction the server sends nothing
// before COMMIT, so a peek that queued behind it hung InTx for good. Here
// a goroutine parks in Read on the connection the way that reader does.
func TestPeekBesideParkedReader(t *testing.T) {
	testutil.NeedServices(t)
	ctx := ctxT(t)
	conn, err := pgx.Connect(ctx, testutil.PostgresAdminDSN())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	parked := make(chan struct{})
	go func() {
		close(parked)
		var b [1]byte
		_, _ = conn.PgConn().Conn().Read(b[:]) // ends when the connection closes
	}()
	<-parked
	time.Sleep(50 * time.Millisecond) // let it park in the poller

	done := make(chan error, 1)
	go func() { done <- sessionEnded(tx) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("sessionEnded on a live idle session: %v, want nil", err)
		}
	case <-time.After(5 * time.Second):
		conn.PgConn().Conn().Close()
		t.Fatal("sessionEnded waited for the reader parked on the socket")
	}
}
