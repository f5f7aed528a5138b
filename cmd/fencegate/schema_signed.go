package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/fencegate/fencegate/pgfence"
	"github.com/fencegate/fencegate/tokensign"
)

// runSchemaRequireSigned is 'fencegate schema require-signed': it stores
// the token service's keys and cluster id in the database, which from then
// on refuses every fence without a proof that verifies.
//
// The cluster id comes from --cluster-id, or else from the token service
// named by --servers (its /v1/status), so that a typo cannot lock every
// holder out; with both, they must agree.
func runSchemaRequireSigned(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("fencegate schema require-signed", flag.ContinueOnError)
	db := fs.String("db", "", dbFlagHelp)
	keysFile := fs.String("signing-keys", "", "the token service's key file (\"KEYID HEXKEY\" per line; every key is stored, the first is the one that signs) (required unless --off)")
	clusterID := fs.String("cluster-id", "", "the token service's cluster id (fencegate token status shows it) (default: asked from --servers)")
	off := fs.Bool("off", false, "allow unsigned tokens again: delete the stored keys (default false)")
	co := addClientFlags(fs, 30*time.Second)
	serversSet := false
	pos, err := parseInterspersed(fs, args, stderr)
	if err != nil {
		return err
	}
	fs.Visit(func(f *flag.Flag) { serversSet = serversSet || f.Name == "servers" })
	if len(pos) > 0 {
		return usagef("unexpected argument %q", pos[0])
	}
	if *off {
		if *keysFile != "" || *clusterID != "" {
			return usagef("--off takes no --signing-keys or --cluster-id")
		}
		conn, name, err := connectDB(ctx, *db)
		if err != nil {
			return err
		}
		defer conn.Close(context.Background())
		before, err := pgfence.AllowUnsigned(ctx, conn)
		if err != nil {
			return signedExplain(err, name)
		}
		if !before.Required {
			fmt.Fprintf(stdout, "%s did not require signed tokens; nothing changed\n", name)
			return nil
		}
		fmt.Fprintf(stdout, "%s no longer requires signed tokens: the two-argument fence works again and proofs are not verified (was: %s)\n", name, signingLine(before))
		return nil
	}
	if *keysFile == "" {
		return usagef("--signing-keys FILE is required: the key file every token service node signs with")
	}
	keys, err := tokensign.LoadKeys(*keysFile)
	if err != nil {
		return fmt.Errorf("--signing-keys %w", err)
	}
	cid := strings.TrimSpace(*clusterID)
	if cid == "" || serversSet {
		c, err := co.client()
		if err != nil {
			return err
		}
		defer c.Close()
		sctx, cancel := context.WithTimeout(ctx, co.timeout)
		defer cancel()
		st, err := c.Status(sctx)
		if err != nil {
			return fmt.Errorf("cannot ask the token service for its cluster id (%v); give --cluster-id ID (fencegate token status shows it) or --servers URLS", err)
		}
		if st.ClusterID == "" {
			return fmt.Errorf("the token service at %s does not know its cluster id yet; retry once it has a leader, or give --cluster-id", strings.Join(c.Servers(), ","))
		}
		if cid != "" && cid != st.ClusterID {
			return fmt.Errorf("--cluster-id %s is not the cluster id %s of the token service at --servers; tokens of that service would all be refused", cid, st.ClusterID)
		}
		cid = st.ClusterID
	}
	conn, name, err := connectDB(ctx, *db)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	before, err := pgfence.RequireSigned(ctx, conn, cid, keys)
	if err != nil {
		return signedExplain(err, name)
	}
	ids := make([]string, 0, len(keys.Keys()))
	for _, k := range keys.Keys() {
		ids = append(ids, k.ID)
	}
	fmt.Fprintf(stdout, "%s requires signed tokens of cluster %s: keys %s (%s signs)\n", name, cid, strings.Join(ids, ", "), ids[0])
	if before.Required {
		fmt.Fprintf(stdout, "  was: %s\n", signingLine(before))
	}
	fmt.Fprintln(stdout, "  fences now need fencegate.fence(resource, token, proof); the two-argument fence and fence_many are refused")
	return nil
}

func signedExplain(err error, name string) error {
	if errors.Is(err, pgfence.ErrOldSchema) {
		return fmt.Errorf("schema fencegate in %s predates signed tokens: run 'fencegate schema upgrade --db DSN' first", name)
	}
	return explain(err, name)
}

func signingLine(s *pgfence.Signing) string {
	if !s.Required {
		return "not required (fencegate schema require-signed turns them on)"
	}
	return fmt.Sprintf("required, cluster %s, keys %s", s.ClusterID, strings.Join(s.KeyIDs, ", "))
}
