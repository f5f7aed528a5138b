package bench

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestLookPathNamesPackage(t *testing.T) {
	_, err := LookPath("no-such-program-xyz", "some-package")
	if !errors.Is(err, ErrMissingBinary) || !strings.Contains(err.Error(), "apt-get install some-package") {
		t.Fatalf("LookPath=%v, want ErrMissingBinary naming the package", err)
	}
}

func TestRunClosed(t *testing.T) {
	calls := 0
	r, err := RunClosed(context.Background(), 1, 50*time.Millisecond, func(ctx context.Context, w int) error {
		calls++
		if calls%2 == 0 {
			return errors.New("even")
		}
		return nil
	})
	if err == nil || r.Errors == 0 || r.Ops == 0 || r.Ops+r.Errors != calls {
		t.Fatalf("RunClosed=%+v, %v after %d calls; want ops and errors counted", r, err, calls)
	}
}
