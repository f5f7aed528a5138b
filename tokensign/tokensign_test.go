package tokensign_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/tokensign"
)

var (
	hexA = strings.Repeat("ab", 32)
	hexB = strings.Repeat("cd", 40)
)

func ring(t *testing.T, text string) *tokensign.Keyring {
	t.Helper()
	r, err := tokensign.ParseKeys(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestSignVerify(t *testing.T) {
	r := ring(t, "# keys\nk2 "+hexB+"\n\nk1 "+hexA+"\n")
	p := r.Sign("c1", "orders/42", 7)
	if !strings.HasPrefix(p, "k2.") || len(p) != 3+64 {
		t.Fatalf("proof %q", p)
	}
	if err := r.Verify("c1", "orders/42", 7, p); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		cluster, resource string
		token             int64
	}{{"c2", "orders/42", 7}, {"c1", "orders/43", 7}, {"c1", "orders/42", 8}, {"c1o", "rders/42", 7}} {
		if err := r.Verify(c.cluster, c.resource, c.token, p); !errors.Is(err, tokensign.ErrBadProof) {
			t.Errorf("%+v: %v, want ErrBadProof", c, err)
		}
	}
	// The old key still verifies what it signed.
	old := ring(t, "k1 "+hexA+"\n")
	if err := r.Verify("c1", "x", 1, old.Sign("c1", "x", 1)); err != nil {
		t.Fatalf("rotation: %v", err)
	}
	if err := old.Verify("c1", "x", 1, r.Sign("c1", "x", 1)); !errors.Is(err, tokensign.ErrUnknownKey) {
		t.Fatalf("unknown key: %v", err)
	}
}

// TestMessageIsHMAC pins the documented construction: HMAC-SHA256 over the
// length-prefixed message, and the pads the database uses.
func TestMessageIsHMAC(t *testing.T) {
	secret, _ := hex.DecodeString(hexB)
	r, err := tokensign.NewKeyring(tokensign.Key{ID: "k", Secret: secret})
	if err != nil {
		t.Fatal(err)
	}
	msg := tokensign.Message("cid", "res", 258)
	want := "fencegate-proof-v1" + "\x00\x00\x00\x03cid" + "\x00\x00\x00\x03res" + "\x00\x00\x00\x00\x00\x00\x01\x02"
	if string(msg) != want {
		t.Fatalf("message %q, want %q", msg, want)
	}
	m := hmac.New(sha256.New, secret)
	m.Write(msg)
	mac := m.Sum(nil)
	if got := r.Sign("cid", "res", 258); got != "k."+hex.EncodeToString(mac) {
		t.Fatalf("sign %s", got)
	}
	inner, outer := r.Keys()[0].Pads()
	h1 := sha256.Sum256(append(inner[:], msg...))
	h2 := sha256.Sum256(append(outer[:], h1[:]...))
	if !hmac.Equal(h2[:], mac) {
		t.Fatal("pads do not give the HMAC")
	}
	long := make([]byte, 100)
	r2, _ := tokensign.NewKeyring(tokensign.Key{ID: "l", Secret: long})
	inner, outer = r2.Keys()[0].Pads()
	m = hmac.New(sha256.New, long)
	m.Write(msg)
	h1 = sha256.Sum256(append(inner[:], msg...))
	h2 = sha256.Sum256(append(outer[:], h1[:]...))
	if !hmac.Equal(h2[:], m.Sum(nil)) {
		t.Fatal("pads of a long key do not give the HMAC")
	}
}

func TestBadKeyFiles(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct{ name, text, want string }{
		{"empty", "# nothing\n", "no keys"},
		{"short", "k1 " + strings.Repeat("ab", 31) + "\n", "is 31 bytes; use at least 32"},
		{"not hex", "k1 " + strings.Repeat("zz", 32) + "\n", "not hex digits"},
		{"duplicate", "k1 " + hexA + "\nk1 " + hexB + "\n", "line 2: key id k1 is listed twice"},
		{"one field", "k1\n", "line 1 has 1 fields"},
		{"bad id", "k.1 " + hexA + "\n", "may hold only letters"},
	} {
		path := filepath.Join(dir, strings.ReplaceAll(c.name, " ", "_"))
		if err := os.WriteFile(path, []byte(c.text), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := tokensign.LoadKeys(path)
		if !errors.Is(err, tokensign.ErrKeyFile) || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), path) {
			t.Errorf("%s: %v, want one naming %s and %q", c.name, err, path, c.want)
		}
		if err != nil && (strings.Contains(err.Error(), hexA) || strings.Contains(err.Error(), hexB) || strings.Contains(err.Error(), strings.Repeat("ab", 31))) {
			t.Errorf("%s: error shows the key: %v", c.name, err)
		}
		if err != nil && strings.Count(err.Error(), "\n") > 0 {
			t.Errorf("%s: more than one line: %q", c.name, err)
		}
	}
	_, err := tokensign.LoadKeys(filepath.Join(dir, "missing"))
	if !errors.Is(err, tokensign.ErrKeyFile) || !strings.Contains(err.Error(), "does not exist") {
		t.Errorf("missing: %v", err)
	}
	unreadable := filepath.Join(dir, "unreadable")
	if err := os.Mkdir(unreadable, 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := tokensign.LoadKeys(unreadable); !errors.Is(err, tokensign.ErrKeyFile) {
		t.Errorf("unreadable: %v", err)
	}
}

func TestMalformedProofs(t *testing.T) {
	r := ring(t, "k1 "+hexA+"\n")
	for _, p := range []string{"", "k1", "k1.", "k1." + strings.Repeat("A", 64), "k1." + strings.Repeat("a", 63), ".aa", "k 1." + strings.Repeat("a", 64)} {
		if err := r.Verify("c", "r", 1, p); !errors.Is(err, tokensign.ErrMalformed) {
			t.Errorf("%q: %v, want ErrMalformed", p, err)
		}
	}
}

func BenchmarkSign(b *testing.B) {
	r, _ := tokensign.NewKeyring(tokensign.Key{ID: "k1", Secret: make([]byte, 32)})
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			_ = r.Sign("6f1c2d9e-cluster", "orders/42", 123456789)
		}
	})
}
