// Package tokensign makes fencing tokens unforgeable: the token service
// signs each token it hands out, bound to its cluster and resource, and a
// database that requires signatures (schema fencegate with signing keys,
// see package pgfence) verifies the proof inside the fence before anything
// advances.
//
// A proof is an HMAC-SHA256 under a key the operator gives every token
// service node and every database, over this message (all lengths and
// integers big-endian):
//
//	"fencegate-proof-v1"                      18 bytes, the domain
//	uint32 len(clusterID) || clusterID        the token service's cluster id
//	uint32 len(resource)  || resource         the resource, as UTF-8 bytes
//	int64  token                              the fencing token
//
// Every variable field is length-prefixed, so no two (cluster, resource,
// token) triples share a message. The proof's text form is KEYID.HEX: the
// id of the key that signed (letters, digits, '_' and '-', at most 64),
// a dot, and the 32-byte MAC as 64 lowercase hex digits, e.g.
// "k2026.3f1a…". docs/protocol.md ("Proofs") states the same.
//
// A key file holds one key per line, "KEYID HEXKEY", with at least 32 bytes
// (64 hex digits) of key; blank lines and lines starting with '#' are
// ignored. The first key signs, the others only verify: to rotate, put the
// new key first and keep the old one listed until no token it signed is in
// use, on every token service node and in every database.
package tokensign

import (
	"bufio"
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"strings"
	"sync"
)

// Domain is the fixed prefix of every signed message.
const Domain = "fencegate-proof-v1"

// MinKeyBytes is the shortest key accepted: 32 bytes, SHA-256's output size.
const MinKeyBytes = 32

// MaxKeyIDLen caps key ids.
const MaxKeyIDLen = 64

// MACBytes is the length of a proof's MAC.
const MACBytes = sha256.Size

var (
	// ErrKeyFile: a key file is missing, unreadable or malformed; the
	// error says which line and what to do.
	ErrKeyFile = errors.New("tokensign: bad signing key file")
	// ErrMalformed: a proof is not of the form KEYID.HEX.
	ErrMalformed = errors.New("tokensign: malformed proof")
	// ErrUnknownKey: a proof names a key id that is not in the key ring.
	ErrUnknownKey = errors.New("tokensign: proof under an unknown key")
	// ErrBadProof: the proof does not match (cluster, resource, token):
	// forged, or minted for another resource or by another cluster.
	ErrBadProof = errors.New("tokensign: proof does not match")
)

// Key is one signing key.
type Key struct {
	ID     string
	Secret []byte
}

// Pads returns the HMAC-SHA256 inner and outer padded keys, K0 XOR ipad
// and K0 XOR opad (RFC 2104), from which HMAC(K, m) =
// SHA256(outer || SHA256(inner || m)). The database stores these, so that
// it computes the MAC with its built-in sha256 alone.
func (k Key) Pads() (inner, outer [sha256.BlockSize]byte) {
	var k0 [sha256.BlockSize]byte
	if len(k.Secret) > sha256.BlockSize {
		sum := sha256.Sum256(k.Secret)
		copy(k0[:], sum[:])
	} else {
		copy(k0[:], k.Secret)
	}
	for i := range k0 {
		inner[i] = k0[i] ^ 0x36
		outer[i] = k0[i] ^ 0x5c
	}
	return inner, outer
}

// Keyring is an ordered set of keys: the first signs, all verify. It is
// safe for concurrent use.
type Keyring struct {
	keys []Key
	byID map[string]int
	pool []sync.Pool // one per key: reusable HMAC states
}

// NewKeyring returns a key ring of keys, the first of which signs. It
// refuses an empty list, a bad or duplicate id and a key shorter than
// MinKeyBytes.
func NewKeyring(keys ...Key) (*Keyring, error) {
	if len(keys) == 0 {
		return nil, fmt.Errorf("%w: no keys", ErrKeyFile)
	}
	r := &Keyring{byID: map[string]int{}, pool: make([]sync.Pool, len(keys))}
	for i, k := range keys {
		if err := checkKeyID(k.ID); err != nil {
			return nil, fmt.Errorf("%w: key %d: %v", ErrKeyFile, i+1, err)
		}
		if len(k.Secret) < MinKeyBytes {
			return nil, fmt.Errorf("%w: key %s is %d bytes; use at least %d (e.g. openssl rand -hex 32)", ErrKeyFile, k.ID, len(k.Secret), MinKeyBytes)
		}
		if _, dup := r.byID[k.ID]; dup {
			return nil, fmt.Errorf("%w: key id %s is listed twice; every key needs its own id", ErrKeyFile, k.ID)
		}
		r.byID[k.ID] = i
		secret := bytes.Clone(k.Secret)
		r.keys = append(r.keys, Key{ID: k.ID, Secret: secret})
		r.pool[i].New = func() any { return hmac.New(sha256.New, secret) }
	}
	return r, nil
}

func checkKeyID(id string) error {
	if id == "" || len(id) > MaxKeyIDLen {
		return fmt.Errorf("key id %q must be 1 to %d characters", id, MaxKeyIDLen)
	}
	for _, c := range []byte(id) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return fmt.Errorf("key id %q may hold only letters, digits, '_' and '-'", id)
		}
	}
	return nil
}

// LoadKeys reads a key file (see the package comment). Every error names
// the file and, where there is one, the line, and never shows a key.
func LoadKeys(path string) (*Keyring, error) {
	f, err := os.Open(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("%w: %s does not exist; create it with lines \"KEYID HEXKEY\" (e.g. echo \"k1 $(openssl rand -hex 32)\" > %s)", ErrKeyFile, path, path)
		}
		return nil, fmt.Errorf("%w: cannot read %s: %v", ErrKeyFile, path, err)
	}
	defer f.Close()
	r, err := ParseKeys(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return r, nil
}

// ParseKeys reads key lines "KEYID HEXKEY" from r.
func ParseKeys(r io.Reader) (*Keyring, error) {
	var keys []Key
	sc := bufio.NewScanner(r)
	n := 0
	for sc.Scan() {
		n++
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) != 2 {
			return nil, fmt.Errorf("%w: line %d has %d fields; write \"KEYID HEXKEY\"", ErrKeyFile, n, len(f))
		}
		if err := checkKeyID(f[0]); err != nil {
			return nil, fmt.Errorf("%w: line %d: %v", ErrKeyFile, n, err)
		}
		secret, err := hex.DecodeString(f[1])
		if err != nil {
			return nil, fmt.Errorf("%w: line %d: the key of %s is not hex digits; write it as 64 or more hex digits (e.g. openssl rand -hex 32)", ErrKeyFile, n, f[0])
		}
		if len(secret) < MinKeyBytes {
			return nil, fmt.Errorf("%w: line %d: the key of %s is %d bytes; use at least %d (64 hex digits, e.g. openssl rand -hex 32)", ErrKeyFile, n, f[0], len(secret), MinKeyBytes)
		}
		for _, k := range keys {
			if k.ID == f[0] {
				return nil, fmt.Errorf("%w: line %d: key id %s is listed twice; every key needs its own id", ErrKeyFile, n, f[0])
			}
		}
		keys = append(keys, Key{ID: f[0], Secret: secret})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrKeyFile, err)
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("%w: no keys; write one \"KEYID HEXKEY\" per line, the signing key first", ErrKeyFile)
	}
	return NewKeyring(keys...)
}

// Keys returns the keys, the signing key first. The caller must not change
// their secrets.
func (r *Keyring) Keys() []Key { return r.keys }

// SigningKeyID is the id of the key that signs.
func (r *Keyring) SigningKeyID() string { return r.keys[0].ID }

// Message returns the signed message for (clusterID, resource, token).
func Message(clusterID, resource string, token int64) []byte {
	return appendMessage(make([]byte, 0, len(Domain)+16+len(clusterID)+len(resource)), clusterID, resource, token)
}

func appendMessage(b []byte, clusterID, resource string, token int64) []byte {
	b = append(b, Domain...)
	b = binary.BigEndian.AppendUint32(b, uint32(len(clusterID)))
	b = append(b, clusterID...)
	b = binary.BigEndian.AppendUint32(b, uint32(len(resource)))
	b = append(b, resource...)
	return binary.BigEndian.AppendUint64(b, uint64(token))
}

func (r *Keyring) mac(i int, clusterID, resource string, token int64, out []byte) []byte {
	h := r.pool[i].Get().(hash.Hash)
	var buf [256]byte
	h.Reset()
	h.Write(appendMessage(buf[:0], clusterID, resource, token))
	out = h.Sum(out)
	r.pool[i].Put(h)
	return out
}

// Sign returns the proof of (clusterID, resource, token) under the signing
// key, as KEYID.HEX.
func (r *Keyring) Sign(clusterID, resource string, token int64) string {
	var sum [MACBytes]byte
	mac := r.mac(0, clusterID, resource, token, sum[:0])
	id := r.keys[0].ID
	out := make([]byte, len(id)+1+2*MACBytes)
	copy(out, id)
	out[len(id)] = '.'
	hex.Encode(out[len(id)+1:], mac)
	return string(out)
}

// ParseProof splits a proof into its key id and MAC, or says what is wrong
// with it (ErrMalformed).
func ParseProof(proof string) (keyID string, mac []byte, err error) {
	id, h, ok := strings.Cut(proof, ".")
	if !ok {
		return "", nil, fmt.Errorf("%w: %q has no '.'; a proof is KEYID.HEX as the token service returns it", ErrMalformed, short(proof))
	}
	if err := checkKeyID(id); err != nil {
		return "", nil, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if len(h) != 2*MACBytes {
		return "", nil, fmt.Errorf("%w: the part after '.' is %d characters; it must be %d hex digits", ErrMalformed, len(h), 2*MACBytes)
	}
	for _, c := range []byte(h) {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return "", nil, fmt.Errorf("%w: the part after '.' must be lowercase hex digits", ErrMalformed)
		}
	}
	mac, _ = hex.DecodeString(h)
	return id, mac, nil
}

func short(s string) string {
	if len(s) > 80 {
		return s[:80] + "..."
	}
	return s
}

// Verify checks proof against (clusterID, resource, token) under the key it
// names: nil, or an error matching ErrMalformed, ErrUnknownKey or
// ErrBadProof.
func (r *Keyring) Verify(clusterID, resource string, token int64, proof string) error {
	id, mac, err := ParseProof(proof)
	if err != nil {
		return err
	}
	i, ok := r.byID[id]
	if !ok {
		return fmt.Errorf("%w: key id %s is not among the verifying keys", ErrUnknownKey, id)
	}
	var sum [MACBytes]byte
	if !hmac.Equal(mac, r.mac(i, clusterID, resource, token, sum[:0])) {
		return fmt.Errorf("%w: token %d for resource %q was not signed by cluster %s under key %s", ErrBadProof, token, resource, clusterID, id)
	}
	return nil
}
