package tokenservice_test

import (
	"testing"

	"github.com/fencegate/fencegate/internal/testutil"
)

func TestMain(m *testing.M) { testutil.Main(m, "^Example$") }
