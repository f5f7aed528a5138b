package proxy

import (
	"bytes"
	"testing"
)

// BenchmarkFrontendPump pushes pipelined simple Queries and extended
// Parse/Bind/Execute/Sync batches through the client-to-upstream pump in
// memory; allocs/op shows the fast path allocates nothing per message.
func BenchmarkFrontendPump(b *testing.B) {
	one := bytes.Join([][]byte{
		frame('Q', "SELECT abalance FROM pgbench_accounts WHERE aid = 42\x00"),
		frame('P', "\x00SELECT abalance FROM pgbench_accounts WHERE aid = $1\x00\x00\x00"),
		frame('B', "\x00\x00\x00\x00\x00\x01\x00\x00\x00\x0242\x00\x00"),
		frame('D', "P\x00"),
		frame('E', "\x00\x00\x00\x00\x00"),
		frame('S', ""),
	}, nil)
	const per = 1000
	in := bytes.Repeat(one, per)
	b.SetBytes(int64(len(in)))
	b.ReportAllocs()
	for b.Loop() {
		s, _, _ := memSession(b, in, nil)
		_ = s.frontendPump()
	}
}

// BenchmarkBackendPump pushes result sets through the upstream-to-client
// pump in memory.
func BenchmarkBackendPump(b *testing.B) {
	one := bytes.Join([][]byte{
		frame('1', ""), frame('2', ""),
		frame('T', "\x00\x01abalance\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x17\x00\x04\xff\xff\xff\xff\x00\x00"),
		frame('D', "\x00\x01\x00\x00\x00\x010"),
		frame('C', "SELECT 1\x00"),
		frame('Z', "I"),
	}, nil)
	in := bytes.Repeat(one, 1000)
	b.SetBytes(int64(len(in)))
	b.ReportAllocs()
	for b.Loop() {
		s, _, _ := memSession(b, nil, in)
		s.backendPump()
	}
}
