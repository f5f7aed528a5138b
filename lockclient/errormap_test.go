package lockclient

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/fencegate/fencegate/tokenservice/tokenservicetest"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// errorMapRow is one row of testdata/error-map.json, the error map of
// docs/protocol.md that the Python and Node.js suites drive too.
type errorMapRow struct {
	At       string `json:"at"`
	SQLState string `json:"sqlstate"`
	Kind     string `json:"kind"`
}

func loadErrorMap(t *testing.T) []errorMapRow {
	t.Helper()
	raw, err := os.ReadFile("testdata/error-map.json")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct{ Rows []errorMapRow }
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	return doc.Rows
}

// errorKind names what InTx reported, in the error map's words.
func errorKind(err error) string {
	var pgErr *pgconn.PgError
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, ErrCommitUnknown):
		return "commit_unknown"
	case errors.Is(err, ErrStaleToken):
		return "stale_token"
	case errors.Is(err, ErrUnfenced):
		return "unfenced"
	case errors.Is(err, ErrFenceMisuse):
		return "fence_misuse"
	case errors.Is(err, ErrFenceTimeout):
		return "fence_timeout"
	case errors.Is(err, ErrSchemaInvalid):
		return "schema_invalid"
	case errors.Is(err, ErrProtectedDDL):
		return "protected_ddl"
	case errors.Is(err, ErrPrivilegedRole):
		return "privileged_role"
	case errors.Is(err, ErrBadProof):
		return "bad_proof"
	case errors.Is(err, ErrSerialization):
		return "serialization"
	case errors.As(err, &pgErr) && strings.HasPrefix(pgErr.Code, "FG"):
		return "fence_error"
	}
	return "failed"
}

// commitProbeSQL makes PostgreSQL raise the SQLSTATE in setting fg.code
// while it commits: a deferred constraint trigger on a temporary table.
const commitProbeSQL = `CREATE TEMP TABLE IF NOT EXISTS fg_commit_probe (x int);
CREATE OR REPLACE FUNCTION pg_temp.fg_raise() RETURNS trigger LANGUAGE plpgsql AS
  $$ BEGIN RAISE EXCEPTION 'fencegate: raised at commit by the test' USING ERRCODE = current_setting('fg.code'); END $$;
DROP TRIGGER IF EXISTS fg_commit_probe_t ON fg_commit_probe;
CREATE CONSTRAINT TRIGGER fg_commit_probe_t AFTER INSERT ON fg_commit_probe DEFERRABLE INITIALLY DEFERRED
  FOR EACH ROW EXECUTE FUNCTION pg_temp.fg_raise()`

// connectOnBegin is a Beginner that connects when asked to begin, as a
// pool does for its first transaction: the gate's refusal of the session
// then comes from Begin.
type connectOnBegin string

func (dsn connectOnBegin) Begin(ctx context.Context) (pgx.Tx, error) {
	c, err := pgx.Connect(ctx, string(dsn))
	if err != nil {
		return nil, err
	}
	return c.Begin(ctx)
}

// testErrorMap drives every row of the error map against the real stack,
// straight to PostgreSQL and through the gate, and checks InTx's verdict.
func testErrorMap(t *testing.T, cluster *tokenservicetest.Cluster) {
	f := fencedDB(t)
	tr := sharedRedis(t)
	c := tr.client(t, cluster.Client(t), WithTxRetries(1))
	rows := loadErrorMap(t)
	passed := 0
	for _, path := range []struct{ name, dsn string }{{"straight", f.app}, {"through the gate", f.proxy}} {
		db := connect(t, path.dsn)
		if _, err := db.Exec(ctxT(t), commitProbeSQL); err != nil {
			t.Fatalf("%s: %v", path.name, err)
		}
		for _, row := range rows {
			if row.At == "session" && path.name == "straight" {
				continue // the gate's refusal
			}
			t.Run(fmt.Sprintf("%s/%s %s", path.name, row.At, row.SQLState), func(t *testing.T) {
				l := mustAcquire(t, c, "errmap-"+testutil.RandomName(""))
				defer l.Release(ctxT(t))
				var err error
				switch row.At {
				case "body":
					err = l.InTx(ctxT(t), db, func(tx pgx.Tx) error {
						_, err := tx.Exec(ctxT(t), fmt.Sprintf("DO $$ BEGIN RAISE EXCEPTION 'fencegate: raised by the test' USING ERRCODE = '%s'; END $$", row.SQLState))
						return err
					})
				case "commit":
					err = l.InTx(ctxT(t), db, func(tx pgx.Tx) error {
						if _, err := tx.Exec(ctxT(t), "SELECT set_config('fg.code', $1, true)", row.SQLState); err != nil {
							return err
						}
						_, err := tx.Exec(ctxT(t), "INSERT INTO fg_commit_probe VALUES (1)")
						return err
					})
				case "session":
					// The administrator (a superuser) through the gate.
					u, _ := url.Parse(path.dsn)
					a, _ := url.Parse(f.db.DSN)
					u.User = a.User
					err = l.InTx(ctxT(t), connectOnBegin(u.String()), func(pgx.Tx) error { return nil })
				}
				if got := errorKind(err); got != row.Kind {
					t.Fatalf("%s at %s: InTx = %v (%s); the error map says %s", row.SQLState, row.At, err, got, row.Kind)
				}
				passed++
			})
		}
	}
	t.Logf("error map: %d rows, %d checks passed", len(rows), passed)
}
