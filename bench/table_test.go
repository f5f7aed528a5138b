package bench

import (
	"context"
	"errors"
	"flag"
	"io"
	"slices"
	"testing"
	"time"
)

func TestTable(t *testing.T) {
	tab := NewTable("clients", "system", "tokens/s").Labels(2)
	tab.Row("1", "fencegate", "1,234")
	tab.Row("1", "etcd", "352")
	tab.Separator()
	tab.Row("64", "fencegate/etcd", "10.00x")
	short := NewTable("a", "b")
	short.Row("x")
	short.Row("y", "1", "extra")
	for _, c := range []struct {
		tab  *Table
		want string
	}{
		{tab, "clients  system          tokens/s\n---------------------------------\n1        fencegate          1,234\n" +
			"1        etcd                 352\n---------------------------------\n64       fencegate/etcd    10.00x\n"},
		{short, "a  b\n-----------\nx\ny  1  extra\n"},
	} {
		if got := c.tab.String(); got != c.want {
			t.Errorf("table:\n%s\nwant:\n%s", got, c.want)
		}
	}
}

func TestIntList(t *testing.T) {
	var l IntList
	if err := l.Set("1, 64"); err != nil {
		t.Fatalf("Set(1, 64): %v", err)
	}
	if got, want := []int(l), []int{1, 64}; !slices.Equal(got, want) {
		t.Errorf("IntList=%v, want %v", got, want)
	}
	if got, want := l.String(), "1,64"; got != want {
		t.Errorf("String()=%q, want %q", got, want)
	}
	for _, bad := range []string{"", "1,,2", "0", "-3", "x"} {
		if err := l.Set(bad); err == nil {
			t.Errorf("Set(%q) accepted", bad)
		}
	}
}

func TestFlags(t *testing.T) {
	parse := func(args ...string) (Flags, error) {
		var f Flags
		fs := flag.NewFlagSet("x", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		f.Register(fs, []int{1, 8})
		return f, Parse(fs, &f, args)
	}
	f, err := parse()
	if err != nil || f.Runs != 3 || f.Duration != 5*time.Second || !slices.Equal(f.Concurrency, IntList{1, 8}) || f.JSON || f.Keep {
		t.Errorf("defaults = %+v, %v", f, err)
	}
	if _, err := parse("--help"); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("--help: %v, want flag.ErrHelp", err)
	}
	for _, bad := range [][]string{{"--runs", "0"}, {"--nope"}, {"extra"}, {"--concurrency", "0"}} {
		if _, err := parse(bad...); !errors.As(err, new(UsageError)) {
			t.Errorf("Parse(%q)=%v, want a UsageError", bad, err)
		}
	}
	if got, err := ParseSystems("b,a", []string{"a", "b"}); err != nil || !slices.Equal(got, []string{"b", "a"}) {
		t.Errorf("ParseSystems(b,a)=%v, %v", got, err)
	}
	if _, err := ParseSystems("a,c", []string{"a", "b"}); err == nil || err.Error() != `unknown system "c" in --systems; choose from a,b` {
		t.Errorf("ParseSystems(a,c)=%v", err)
	}
	f.FencegateBin = "/opt/fg"
	if bin, version, err := f.Fencegate(context.Background(), t.TempDir(), t.Logf); bin != "/opt/fg" || version != "prebuilt /opt/fg" || err != nil {
		t.Errorf("Fencegate()=%q, %q, %v", bin, version, err)
	}
}
