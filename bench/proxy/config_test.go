package main

import (
	"io"
	"slices"
	"strings"
	"testing"
)

func TestBouncerIni(t *testing.T) {
	ini := bouncerConfig{
		ListenPort: 16432, Database: "fg_bench_x", UpstreamHost: "127.0.0.1", UpstreamPort: 5432,
		AuthFile: "/tmp/d/users.txt", PoolSize: 8,
	}.ini()
	for _, want := range []string{
		"[databases]\nfg_bench_x = host=127.0.0.1 port=5432 dbname=fg_bench_x\n",
		"\n[pgbouncer]\n",
		"\nlisten_addr = 127.0.0.1\n",
		"\nlisten_port = 16432\n",
		"\nunix_socket_dir = \n",
		"\nauth_type = trust\n",
		"\nauth_file = /tmp/d/users.txt\n",
		"\npool_mode = session\n",
		"\ndefault_pool_size = 8\n",
		"\nmax_client_conn = 100\n",
	} {
		if !strings.Contains(ini, want) {
			t.Errorf("pgbouncer.ini lacks %q:\n%s", want, ini)
		}
	}
	if got, want := authFile("postgres"), "\"postgres\" \"\"\n"; got != want {
		t.Errorf("authFile=%q, want %q", got, want)
	}
}

func TestFencedScript(t *testing.T) {
	want := "BEGIN;\nSELECT fencegate.fence('acct:' || :aid::text, :tok::bigint);\nUPDATE fenced_accounts SET abalance"
	if !strings.Contains(fencedScript, want) {
		t.Errorf("fencedScript lacks %q:\n%s", want, fencedScript)
	}
}

func TestWorkloadArgs(t *testing.T) {
	sc := scripts{fenced: "f.sql"}
	w, _ := findWorkload("fenced-write")
	if got, want := w.pgbenchArgs(sc), []string{"-M", "extended", "-f", "f.sql"}; !slices.Equal(got, want) {
		t.Errorf("args of fenced-write=%v, want %v", got, want)
	}
	s, _ := findWorkload("select-simple")
	if got, want := s.pgbenchArgs(sc), []string{"-M", "simple", "-S"}; !slices.Equal(got, want) {
		t.Errorf("args of select-simple=%v, want %v", got, want)
	}
}

func TestRotate(t *testing.T) {
	xs := []string{"a", "b", "c"}
	for r, want := range [][]string{{"a", "b", "c"}, {"b", "c", "a"}, {"c", "a", "b"}, {"a", "b", "c"}} {
		if got := rotate(xs, r); !slices.Equal(got, want) {
			t.Errorf("rotate(%v, %d)=%v, want %v", xs, r, got, want)
		}
	}
}

func TestParseOptions(t *testing.T) {
	o, err := parseOptions(nil, io.Discard)
	if err != nil {
		t.Fatalf("defaults: %v", err)
	}
	if !slices.Equal(o.Concurrency, []int{1, 8}) || o.Runs != 3 || o.scale != 10 || len(o.workloads) != 3 {
		t.Errorf("defaults=%+v", o)
	}
	for _, bad := range [][]string{
		{"--workloads", "select-simple,nope"},
		{"--systems", "direct,mysql"},
		{"--scale", "0"},
		{"--runs", "0"},
		{"extra"},
	} {
		if _, err := parseOptions(bad, io.Discard); err == nil {
			t.Errorf("parseOptions(%v) accepted", bad)
		}
	}
}
