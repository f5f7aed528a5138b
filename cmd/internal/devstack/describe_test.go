package devstack

import (
	"strings"
	"testing"

	"github.com/fencegate/fencegate/internal/pgdb"
	"github.com/fencegate/fencegate/internal/servers"
	"github.com/fencegate/fencegate/pgfence"
	"github.com/fencegate/fencegate/pgfence/pgfencetest/fenceddb"
)

// A stack that started Redis masters has no Redis server: Describe lists
// the masters instead of failing on the missing one.
func TestDescribeRedisMasters(t *testing.T) {
	s := &Stack{
		DataDir:  "/data",
		Postgres: &servers.Postgres{DSN: pgdb.DefaultAdminDSN, Source: "local server"},
		Masters: []*servers.Redis{{Addr: "127.0.0.1:7001", Source: "started by fencegate"},
			{Addr: "127.0.0.1:7002", Source: "started by fencegate"}},
		Tokens:    &Tokens{},
		ProxyAddr: "127.0.0.1:6432",
		DB:        &FencedDB{AdminDSN: pgdb.DefaultAdminDSN, DB: &fenceddb.DB{Owner: "o", App: "a", Report: &pgfence.Report{}}},
	}
	d := s.Describe()
	for _, want := range []string{"Redis m1    127.0.0.1:7001", "Redis m2    127.0.0.1:7002", "Redlock master"} {
		if !strings.Contains(d, want) {
			t.Errorf("Describe() lacks %q:\n%s", want, d)
		}
	}
	s.Redis, s.Masters = &servers.Redis{Addr: servers.DefaultRedisAddr, Source: "local server"}, nil
	if d := s.Describe(); !strings.Contains(d, "  Redis       "+servers.DefaultRedisAddr+"  (local server)\n") || strings.Contains(d, "master") {
		t.Errorf("Describe() with one Redis:\n%s", d)
	}
}
