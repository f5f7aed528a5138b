package worker

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

func TestConfigAndEvents(t *testing.T) {
	type config struct {
		Name string
		TTL  time.Duration
	}
	env, err := Env(config{"c1", time.Second})
	if err != nil {
		t.Fatal(err)
	}
	name, value, _ := strings.Cut(env, "=")
	if name != ConfigEnv {
		t.Fatalf("Env sets %s, want %s", name, ConfigEnv)
	}
	t.Setenv(ConfigEnv, value)
	var got config
	if err := ReadConfig(&got); err != nil || got != (config{"c1", time.Second}) {
		t.Fatalf("ReadConfig = %+v, %v", got, err)
	}

	var buf bytes.Buffer
	w := NewWriter(&buf)
	want := Event{Kind: "acquired", Token: 7, OK: true, SQLState: "FG001"}
	if err := w.Send(want); err != nil {
		t.Fatal(err)
	}
	line := bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
	if e, ok := Decode(line); !ok || e != want {
		t.Errorf("Decode(%s) = %+v, %v; want %+v", line, e, ok, want)
	}
	if _, ok := Decode([]byte("goroutine 1 [running]:")); ok {
		t.Error("Decode took a line that is not an event")
	}
}
