package clientsuite

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/fencegate/fencegate/pgfence"
	"github.com/fencegate/fencegate/pgfence/pgfencetest"
	"github.com/fencegate/fencegate/proxy/proxytest"
	"github.com/fencegate/fencegate/tokenservice"
	"github.com/fencegate/fencegate/tokenservice/tokenservicetest"
	"github.com/fencegate/fencegate/tokensign"
)

// signed is the part of the stack for signed tokens: a token service that
// signs every token (a one-node cluster: signing does not depend on the
// number of nodes) and a database that requires signed tokens of exactly
// that cluster, as an operator sets them up with `fencegate token serve
// --signing-keys FILE` and `fencegate schema require-signed`.
type signed struct {
	cluster   *tokenservicetest.Cluster
	clusterID string
	keyFile   string // "KEYID HEXKEY", the file the node and the database got
	app       string // the application role, through the fencegate proxy
	admin     string // the administrator, straight to PostgreSQL
}

// startSigned starts the signing token service and prepares the database:
// schema fencegate, a table "ledger" whose row with id X belongs to resource
// "ledger:X", and the signing keys.
func startSigned(t *testing.T, name string) *signed {
	t.Helper()
	secret := make([]byte, 32)
	if _, err := rand.Read(secret); err != nil {
		t.Fatal(err)
	}
	s := &signed{keyFile: filepath.Join(t.TempDir(), "signing-keys")}
	if err := os.WriteFile(s.keyFile, []byte("# the "+name+" tests' signing key\n"+name+"test1 "+hex.EncodeToString(secret)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	keys, err := tokensign.LoadKeys(s.keyFile)
	if err != nil {
		t.Fatal(err)
	}
	s.cluster = tokenservicetest.StartCluster(t, 1, tokenservicetest.WithLogger(quiet(t)), tokenservicetest.WithConfig(func(_ int, cfg *tokenservice.Config) { cfg.SigningKeys = keys }))
	tokens := s.cluster.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	testutil.WaitFor(t, 30*time.Second, "the signing cluster's id", func() error {
		st, err := tokens.Status(ctx)
		if err != nil {
			return err
		}
		if st.ClusterID == "" {
			return errors.New("not recorded yet")
		}
		s.clusterID = st.ClusterID
		return nil
	})

	d := pgfencetest.New(t)
	conn := d.Admin(t)
	if _, err := conn.Exec(ctx, "CREATE TABLE ledger (id text PRIMARY KEY, holder text NOT NULL, token bigint NOT NULL)"); err != nil {
		t.Fatalf("create table ledger: %v", err)
	}
	if err := pgfence.Protect(ctx, conn, "ledger", "'ledger:' || id"); err != nil {
		t.Fatalf("protect ledger: %v", err)
	}
	if _, err := conn.Exec(ctx, "GRANT SELECT, INSERT, UPDATE, DELETE ON ledger TO "+d.App); err != nil {
		t.Fatalf("grant ledger: %v", err)
	}
	if _, err := pgfence.RequireSigned(ctx, conn, s.clusterID, keys); err != nil {
		t.Fatalf("require signed tokens: %v", err)
	}
	s.app, s.admin = proxytest.Start(t, d.AppDSN, quietProxy(t)), d.DSN
	return s
}

// env is what the signed-token tests read (clients/python/tests/test_proof.py,
// clients/node/test/proof.test.js).
func (s *signed) env() []string {
	return []string{
		"FENCEGATE_TEST_SIGNED_TOKEN_SERVERS=" + s.cluster.APIURL(0),
		"FENCEGATE_TEST_SIGNING_CLUSTER_ID=" + s.clusterID,
		"FENCEGATE_TEST_SIGNING_KEYS=" + s.keyFile,
		"FENCEGATE_TEST_SIGNED_DSN=" + s.app,
		"FENCEGATE_TEST_SIGNED_ADMIN_DSN=" + s.admin,
	}
}
