package demo

import (
	"crypto/rand"
	"encoding/hex"
)

func randomName(prefix string) string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}
