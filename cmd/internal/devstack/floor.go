package devstack

import (
	"context"
	"fmt"
	"time"

	"github.com/fencegate/fencegate/tokenclient"
	"github.com/jackc/pgx/v5"
)

// Floor is what RaiseAboveMarks found and did.
type Floor struct {
	// Highest is the highest mark of the database (0 when it holds none).
	Highest int64
	// Before and After are the token counter before and after; After is
	// at least Highest.
	Before, After int64
}

// Raised reports whether the counter had to be raised: the token cluster
// was newer than the database's marks (a reset data directory, a cluster
// rebuilt from nothing).
func (f Floor) Raised() bool { return f.After > f.Before }

// String says what happened, for the user.
func (f Floor) String() string {
	if f.Raised() {
		return fmt.Sprintf("token counter raised from %d to %d, the highest mark of the database: every new token fences its resources", f.Before, f.After)
	}
	return fmt.Sprintf("token counter at %d, at or above the database's highest mark %d", f.After, f.Highest)
}

// RaiseAboveMarks reads the highest mark of the database at adminDSN and
// raises the token counter of the cluster at urls to at least it (never
// lowering it). A token cluster that starts from an empty data directory
// while the database keeps its marks would otherwise hand out tokens every
// fence refuses with FG001, as if a newer holder had written.
func RaiseAboveMarks(ctx context.Context, adminDSN string, urls []string) (Floor, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, adminDSN)
	if err != nil {
		return Floor{}, fmt.Errorf("devstack: read the highest mark: %w", err)
	}
	var f Floor
	err = conn.QueryRow(ctx, "SELECT coalesce(max(token), 0) FROM fencegate.marks").Scan(&f.Highest)
	conn.Close(ctx)
	if err != nil {
		return Floor{}, fmt.Errorf("devstack: read the highest mark: %w", err)
	}
	c, err := tokenclient.NewClient(urls)
	if err != nil {
		return Floor{}, err
	}
	defer c.Close()
	r, err := c.RaiseCounter(ctx, f.Highest)
	if err != nil {
		return Floor{}, fmt.Errorf("devstack: raise the token counter above the marks: %w", err)
	}
	f.Before, f.After = r.Before, r.After
	return f, nil
}
