package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// BuildFencegate builds cmd/fencegate of the fencegate module (the parent
// of the bench module, through its replace directive) into dir/bin, in that
// module, with its own requirements. It returns the binary and a
// description of the source it was built from (commit and Go version).
func BuildFencegate(ctx context.Context, dir string) (bin, version string, err error) {
	goBin, err := LookPath("go", "golang-go")
	if err != nil {
		return "", "", err
	}
	out, err := Command(ctx, goBin, "list", "-m", "-f", "{{.Dir}}", "github.com/fencegate/fencegate").Output()
	root := strings.TrimSpace(string(out))
	if err != nil || root == "" {
		return "", "", errors.New("run this command inside the bench module (go list -m found no fencegate module), or pass --fencegate-bin")
	}
	if err := os.MkdirAll(filepath.Join(dir, "bin"), 0o755); err != nil {
		return "", "", fmt.Errorf("build fencegate: %w", err)
	}
	bin = filepath.Join(dir, "bin", "fencegate")
	cmd := Command(ctx, goBin, "build", "-o", bin, "./cmd/fencegate")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", "", fmt.Errorf("build fencegate: %w\n%s", err, out)
	}
	version = "commit " + Version(ctx, "git", "-C", root, "describe", "--always", "--dirty") +
		", " + Version(ctx, goBin, "version")
	return bin, version, nil
}

// Fencegate returns the fencegate binary to run and its description: the
// one --fencegate-bin names, or else one BuildFencegate builds into dir
// (saying so through logf).
func (f *Flags) Fencegate(ctx context.Context, dir string, logf func(string, ...any)) (bin, version string, err error) {
	if f.FencegateBin != "" {
		return f.FencegateBin, "prebuilt " + f.FencegateBin, nil
	}
	logf("building fencegate")
	return BuildFencegate(ctx, dir)
}

// HasCommand reports whether the fencegate binary bin knows the subcommand
// (for example "token", "serve"): it runs "bin WORDS... --help" and looks
// for the dispatcher's "unknown command" answer.
func HasCommand(ctx context.Context, bin string, words ...string) bool {
	out, err := Command(ctx, bin, append(words, "--help")...).CombinedOutput()
	return err == nil || !bytes.Contains(out, []byte("unknown command"))
}
