package pgfence_test

import (
	"context"
	"fmt"
	"math/rand"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/pgfence"
	"github.com/jackc/pgx/v5"
)

var isolations = []string{"READ COMMITTED", "REPEATABLE READ", "SERIALIZABLE"}

// TestPruneFloorReadAfterUpsert is the interleaving that refutes a fence
// reading the floor before its upsert: a stale holder's fence waits on the
// mark's row lock held by a transaction that deletes the mark, raises the
// floor and commits; the fence then inserts a fresh mark for its stale
// token. Reading the floor after the upsert refuses it, under every
// isolation level.
func TestPruneFloorReadAfterUpsert(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	for i, iso := range isolations {
		t.Run(iso, func(t *testing.T) {
			r := fmt.Sprintf("order:%d", i+1)
			base := int64(1000 * i)
			if err := fenceAs(f.app, fencegate.FenceSQL, r, base+10); err != nil {
				t.Fatal(err)
			}
			del, err := f.admin.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer del.Rollback(ctx) //nolint:errcheck
			if _, err := del.Exec(ctx, "DELETE FROM fencegate.marks WHERE resource = $1", r); err != nil {
				t.Fatal(err)
			}
			stale, err := f.app.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer stale.Rollback(ctx) //nolint:errcheck
			if _, err := stale.Exec(ctx, "SET TRANSACTION ISOLATION LEVEL "+iso); err != nil {
				t.Fatal(err)
			}
			if _, err := stale.Exec(ctx, "SELECT count(*) FROM shop.orders"); err != nil { // the snapshot
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() {
				_, err := stale.Exec(ctx, fencegate.FenceSQL, r, base+5)
				if err == nil {
					_, err = stale.Exec(ctx, "UPDATE shop.orders SET state = 'stale' WHERE id = $1", i+1)
				}
				if err == nil {
					err = stale.Commit(ctx)
				}
				done <- err
			}()
			waitForLockWait(t, f.admin, f.db.App)
			floor := base + 100
			if _, err := del.Exec(ctx, "SELECT setval('fencegate.floor', $1)", floor); err != nil {
				t.Fatal(err)
			}
			if err := del.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			err = <-done
			wantRefused(t, err, fencegate.CodeStaleToken, fmt.Sprintf("(floor %d)", floor))
			var state string
			if err := f.admin.QueryRow(ctx, "SELECT state FROM shop.orders WHERE id = $1", i+1).Scan(&state); err != nil || state == "stale" {
				t.Fatalf("the stale write landed: %q, %v", state, err)
			}
		})
	}
}

// waitForLockWait waits until a session of role is waiting for a lock.
func waitForLockWait(t *testing.T, admin *pgx.Conn, role string) {
	t.Helper()
	for i := 0; i < 500; i++ {
		var n int
		if err := admin.QueryRow(context.Background(), "SELECT count(*) FROM pg_stat_activity WHERE usename = $1 AND wait_event_type = 'Lock'", role).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("the stale fence never waited for the mark's row lock")
}

// accepted is one committed fenced write.
type accepted struct {
	resource   int
	token      int64
	iso        string
	fenceStart time.Time // before the fence statement was sent
	committed  time.Time // after COMMIT returned
}

// raised is one prune: the floor was at least floor from at on.
type raised struct {
	floor int64
	at    time.Time
}

// TestPruneRace races prunes with rising floors against fresh and stale
// holders fencing (all three fence functions) and writing a protected
// table under READ COMMITTED, REPEATABLE READ and SERIALIZABLE, and checks
// from what the clients saw that no committed write has a token lower than
// one committed for its resource before its fence began, and that no
// write with a token at or below a floor committed when its fence began
// after that floor was raised.
func TestPruneRace(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	mustExec(t, f.admin, fmt.Sprintf(`SET ROLE %[1]s;
		CREATE TABLE shop.wlog (id int, tok bigint, iso text);
		RESET ROLE;
		GRANT SELECT, INSERT ON shop.wlog TO %[2]s;
		SELECT fencegate.protect('shop.wlog', $$'order:' || id$$);`, f.data, f.db.App))
	const resources = 4
	dur := 4 * time.Second
	if testing.Short() {
		dur = time.Second
	}
	var counter atomic.Int64
	counter.Store(1000)
	var (
		mu     sync.Mutex
		writes []accepted
		floors []raised
		tries  atomic.Int64
		refuse sync.Map // SQLSTATE -> *atomic.Int64
	)
	deadline := time.Now().Add(dur)
	var wg sync.WaitGroup
	for g := 0; g < 6; g++ {
		conn := f.appConn(t)
		rng := rand.New(rand.NewSource(int64(g)))
		wg.Add(1)
		go func() {
			defer wg.Done()
			var past []int64
			for time.Now().Before(deadline) {
				k := 1 + rng.Intn(resources)
				res := fmt.Sprintf("order:%d", k)
				iso := isolations[rng.Intn(len(isolations))]
				var tok int64
				if len(past) > 0 && rng.Intn(3) == 0 {
					tok = past[rng.Intn(len(past))] // a stale holder: a token taken a while ago
				} else {
					tok = counter.Add(1)
					past = append(past, tok)
					if len(past) > 50 {
						past = past[1:]
					}
				}
				tries.Add(1)
				err := func() error {
					tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: map[string]pgx.TxIsoLevel{"READ COMMITTED": pgx.ReadCommitted, "REPEATABLE READ": pgx.RepeatableRead, "SERIALIZABLE": pgx.Serializable}[iso]})
					if err != nil {
						return err
					}
					defer tx.Rollback(ctx)                                                                     //nolint:errcheck
					if _, err := tx.Exec(ctx, "SELECT count(*) FROM shop.wlog WHERE id = $1", k); err != nil { // take the snapshot early
						return err
					}
					time.Sleep(time.Duration(rng.Intn(3000)) * time.Microsecond)
					start := time.Now()
					switch rng.Intn(3) {
					case 0:
						_, err = tx.Exec(ctx, fencegate.FenceSQL, res, tok)
					case 1:
						_, err = tx.Exec(ctx, fencegate.FenceSignedSQL, res, tok, fakeProof)
					default:
						_, err = tx.Exec(ctx, "SELECT fencegate.fence_many($1::text[], $2::bigint)", []string{res}, tok)
					}
					if err != nil {
						return err
					}
					if _, err := tx.Exec(ctx, "INSERT INTO shop.wlog VALUES ($1, $2, $3)", k, tok, iso); err != nil {
						return err
					}
					if err := tx.Commit(ctx); err != nil {
						return err
					}
					mu.Lock()
					writes = append(writes, accepted{resource: k, token: tok, iso: iso, fenceStart: start, committed: time.Now()})
					mu.Unlock()
					return nil
				}()
				if err != nil {
					code := sqlstate(err)
					switch code {
					case fencegate.CodeStaleToken, "40001", "40P01":
					default:
						t.Errorf("fence %s %d (%s): %v", res, tok, iso, err)
						return
					}
					c, _ := refuse.LoadOrStore(code, new(atomic.Int64))
					c.(*atomic.Int64).Add(1)
				}
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		rng := rand.New(rand.NewSource(99))
		for time.Now().Before(deadline) {
			fl := counter.Load() - int64(rng.Intn(8))
			if _, err := pgfence.Prune(ctx, f.admin, fl, pgfence.PruneOptions{Batch: 1 + rng.Intn(2), Retries: -1}); err != nil {
				t.Errorf("prune at %d: %v", fl, err)
				return
			}
			mu.Lock()
			floors = append(floors, raised{floor: fl, at: time.Now()})
			mu.Unlock()
			time.Sleep(time.Duration(rng.Intn(3000)) * time.Microsecond)
		}
	}()
	wg.Wait()
	if t.Failed() {
		return
	}
	var inDB int
	if err := f.admin.QueryRow(ctx, "SELECT count(*) FROM shop.wlog").Scan(&inDB); err != nil || inDB != len(writes) {
		t.Fatalf("shop.wlog holds %d rows, the clients saw %d commits (%v)", inDB, len(writes), err)
	}
	var below int
	violations := checkPruneRace(writes, floors)
	for _, w := range writes {
		for _, r := range floors {
			if w.token <= r.floor && w.committed.After(r.at) {
				below++ // accepted before the raise, committed after: allowed
				break
			}
		}
	}
	counts := map[string]int64{}
	refuse.Range(func(k, v any) bool { counts[k.(string)] = v.(*atomic.Int64).Load(); return true })
	perIso := map[string]int{}
	for _, w := range writes {
		perIso[w.iso]++
	}
	t.Logf("%d attempts, %d committed %v, refused %v, %d prunes (last floor %d), %d commits at or below a floor raised before they committed (their fence began before the raise)",
		tries.Load(), len(writes), perIso, counts, len(floors), floors[len(floors)-1].floor, below)
	if counts[fencegate.CodeStaleToken] == 0 || len(floors) < 10 || len(writes) < 50 {
		t.Fatalf("the race did not race: %d commits, %d prunes, refusals %v", len(writes), len(floors), counts)
	}
	for _, v := range violations {
		t.Error(v)
	}
}

// checkPruneRace returns every violation of the two invariants.
func checkPruneRace(writes []accepted, floors []raised) []string {
	var out []string
	byRes := map[int][]accepted{}
	for _, w := range writes {
		byRes[w.resource] = append(byRes[w.resource], w)
	}
	for _, ws := range byRes {
		sort.Slice(ws, func(i, j int) bool { return ws[i].committed.Before(ws[j].committed) })
		for _, b := range ws {
			for _, a := range ws {
				if a.committed.Before(b.fenceStart) && b.token < a.token {
					out = append(out, fmt.Sprintf("order:%d: token %d (%s) committed after token %d (%s) had committed before its fence began", b.resource, b.token, b.iso, a.token, a.iso))
				}
			}
		}
	}
	for _, w := range writes {
		for _, r := range floors {
			if w.token <= r.floor && w.fenceStart.After(r.at) {
				out = append(out, fmt.Sprintf("order:%d: token %d (%s) committed at or below floor %d, raised before its fence began", w.resource, w.token, w.iso, r.floor))
			}
		}
	}
	if len(out) > 20 {
		out = append(out[:20], fmt.Sprintf("... and %d more", len(out)-20))
	}
	return out
}

// TestPruneSnapshotBeforePrune: a stale holder whose transaction took its
// snapshot before a whole prune ran (floor raised, its resource's mark
// deleted, committed) fences afterwards: its upsert inserts a fresh mark
// (the deleted row is gone for the conflict check), and the floor, read
// outside its snapshot, refuses it, under every isolation level. A floor
// kept in a table would be read from the old snapshot under REPEATABLE
// READ and SERIALIZABLE and let it through.
func TestPruneSnapshotBeforePrune(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	for i, iso := range isolations {
		t.Run(iso, func(t *testing.T) {
			r := fmt.Sprintf("order:%d", i+1)
			base := int64(1000 * i)
			if err := fenceAs(f.app, fencegate.FenceSQL, r, base+10); err != nil {
				t.Fatal(err)
			}
			stale, err := f.app.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer stale.Rollback(ctx) //nolint:errcheck
			if _, err := stale.Exec(ctx, "SET TRANSACTION ISOLATION LEVEL "+iso); err != nil {
				t.Fatal(err)
			}
			if _, err := stale.Exec(ctx, "SELECT count(*) FROM fencegate.marks"); err != nil { // the snapshot
				t.Fatal(err)
			}
			res, err := pgfence.Prune(ctx, f.admin, base+100, pgfence.PruneOptions{})
			if err != nil || res.Deleted != 1 {
				t.Fatalf("prune: %+v, %v", res, err)
			}
			_, err = stale.Exec(ctx, fencegate.FenceSQL, r, base+5)
			wantRefused(t, err, fencegate.CodeStaleToken, fmt.Sprintf("(floor %d)", base+100))
		})
	}
}
