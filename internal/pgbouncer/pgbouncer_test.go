package pgbouncer

import (
	"strings"
	"testing"
)

func TestINI(t *testing.T) {
	one := Config{ListenPort: 16432, Database: "fg_bench_x", UpstreamHost: "127.0.0.1", UpstreamPort: 5432, PoolSize: 8,
		Settings: map[string]string{"log_pooler_errors": "1"}}.INI("/d/users.txt")
	for _, want := range []string{
		"[databases]\nfg_bench_x = host=127.0.0.1 port=5432 dbname=fg_bench_x\n",
		"\n[pgbouncer]\n",
		"\nlisten_addr = 127.0.0.1\n",
		"\nlisten_port = 16432\n",
		"\nunix_socket_dir = \n",
		"\nauth_type = trust\n",
		"\nauth_file = /d/users.txt\n",
		"\npool_mode = session\n",
		"\ndefault_pool_size = 8\n",
		"\nmax_client_conn = 100\n",
		"\nlog_pooler_errors = 1\n",
	} {
		if !strings.Contains(one, want) {
			t.Errorf("pgbouncer.ini lacks %q:\n%s", want, one)
		}
	}
	every := Config{ListenPort: 1, UpstreamHost: "h", UpstreamPort: 2, Mode: TransactionPooling}.INI("a")
	for _, want := range []string{"[databases]\n* = host=h port=2\n", "\npool_mode = transaction\n", "\ndefault_pool_size = 4\n"} {
		if !strings.Contains(every, want) {
			t.Errorf("pgbouncer.ini lacks %q:\n%s", want, every)
		}
	}
	if got, want := (Config{Users: []string{"postgres", `a"b`}}).AuthFile(), "\"postgres\" \"\"\n\"a\"\"b\" \"\"\n"; got != want {
		t.Errorf("AuthFile=%q, want %q", got, want)
	}
}
