package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"time"

	"github.com/fencegate/fencegate/tokenapi"
)

// tokenSnapshotOpts are the flags of 'fencegate token snapshot'.
type tokenSnapshotOpts struct {
	*clientOpts
	out string
}

// tokenSnapshotFlags defines the flags of 'fencegate token snapshot'.
func tokenSnapshotFlags(fs *flag.FlagSet) *tokenSnapshotOpts {
	o := &tokenSnapshotOpts{clientOpts: addClientFlags(fs, 30*time.Second)}
	fs.StringVar(&o.out, "out", "", "file to write the snapshot to, replaced atomically; - for standard output (required; no default)")
	return o
}

func runTokenSnapshot(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("fencegate token snapshot", flag.ContinueOnError)
	o := tokenSnapshotFlags(fs)
	if err := parseFlagsOnly(fs, args, stderr, "snapshot"); err != nil {
		return err
	}
	if o.out == "" {
		return usagef("--out is required, e.g. --out /var/backups/fencegate-token.json (or - for standard output)")
	}
	c, ctx, done, err := o.session(ctx)
	if err != nil {
		return err
	}
	defer done()
	sn, err := c.Snapshot(ctx)
	if err != nil {
		return err
	}
	b, _ := json.MarshalIndent(sn, "", "  ")
	b = append(b, '\n')
	if o.out == "-" {
		_, err := stdout.Write(b)
		return err
	}
	if err := writeFileAtomic(o.out, b); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "snapshot of cluster %s: counter %d at index %d, term %d, taken %s on leader %s; written to %s\n",
		sn.ClusterID, sn.Counter, sn.Index, sn.Term, sn.Time.Format(time.RFC3339), sn.Leader, o.out)
	return nil
}

// writeFileAtomic replaces path with data: a temporary file in the same
// directory, fsynced, renamed over path, and the directory fsynced.
func writeFileAtomic(path string, data []byte) error {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer os.Remove(f.Name())
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return nil
}

// tokenRestoreOpts are the flags of 'fencegate token restore'.
type tokenRestoreOpts struct {
	*clientOpts
	from   string
	margin int64
	force  bool
}

// tokenRestoreFlags defines the flags of 'fencegate token restore'.
func tokenRestoreFlags(fs *flag.FlagSet) *tokenRestoreOpts {
	o := &tokenRestoreOpts{clientOpts: addClientFlags(fs, 30*time.Second)}
	fs.StringVar(&o.from, "from", "", "snapshot file written by 'fencegate token snapshot' (required; no default)")
	fs.Int64Var(&o.margin, "margin", -1, "tokens to add to the snapshot's counter: at least as many as the lost cluster may have handed out after the snapshot was taken (required; no default)")
	fs.BoolVar(&o.force, "force", false, "raise the counter above 2^62, closer to the largest token 2^63-1, after which the cluster hands out no more tokens (default false)")
	return o
}

func runTokenRestore(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("fencegate token restore", flag.ContinueOnError)
	o := tokenRestoreFlags(fs)
	if err := parseFlagsOnly(fs, args, stderr, "restore"); err != nil {
		return err
	}
	if o.from == "" {
		return usagef("--from is required: the snapshot file to restore from")
	}
	if o.margin < 0 {
		return usagef("--margin is required and may not be negative: how many tokens the lost cluster may have handed out after the snapshot, e.g. --margin 1000000")
	}
	sn, err := readSnapshot(o.from)
	if err != nil {
		return err
	}
	if sn.Counter > math.MaxInt64-o.margin {
		return usagef("--margin %d: the snapshot's counter %d plus the margin exceeds the largest token %d; give a smaller margin", o.margin, sn.Counter, int64(math.MaxInt64))
	}
	target := sn.Counter + o.margin
	if err := checkCeiling(fmt.Sprintf("--margin %d on the snapshot's counter %d", o.margin, sn.Counter), target, o.force); err != nil {
		return err
	}
	c, ctx, done, err := o.session(ctx)
	if err != nil {
		return err
	}
	defer done()
	res, err := c.RaiseCounter(ctx, target)
	if err != nil {
		return err
	}
	// Asked after the raise committed: a cluster that has just started may
	// not yet report its id before a leader has been elected.
	st, err := c.Status(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "snapshot %s: cluster %s, counter %d, taken %s; with margin %d the counter must be at least %d\n",
		o.from, sn.ClusterID, sn.Counter, sn.Time.Format(time.RFC3339), o.margin, target)
	if st.ClusterID != "" && st.ClusterID != sn.ClusterID {
		fmt.Fprintf(stdout, "note: the snapshot is of cluster %s; this cluster is %s\n", sn.ClusterID, st.ClusterID)
	}
	if res.After > res.Before {
		fmt.Fprintf(stdout, "counter raised from %d to %d (entry %d, term %d): every token from now on is above %d\n", res.Before, res.After, res.Index, res.Term, res.After)
	} else {
		fmt.Fprintf(stdout, "counter left at %d, already at least %d (entry %d, term %d): a restore never lowers it\n", res.After, target, res.Index, res.Term)
	}
	return nil
}

// readSnapshot reads and checks a snapshot file.
func readSnapshot(path string) (tokenapi.Snapshot, error) {
	var sn tokenapi.Snapshot
	b, err := os.ReadFile(path)
	if err != nil {
		return sn, fmt.Errorf("read snapshot: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&sn); err != nil {
		return sn, fmt.Errorf("%s is not a snapshot written by 'fencegate token snapshot': %v", path, err)
	}
	switch {
	case sn.Format != tokenapi.SnapshotFormat:
		return sn, fmt.Errorf("%s has format %q, want %q; give a file written by 'fencegate token snapshot'", path, sn.Format, tokenapi.SnapshotFormat)
	case sn.Counter < 0:
		return sn, fmt.Errorf("%s has a negative counter %d; the file is damaged", path, sn.Counter)
	}
	return sn, nil
}
