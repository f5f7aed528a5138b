package proxy

import (
	"bytes"
	"testing"
)

// One pgbench-like extended transaction: the client's messages and the
// server's answers.
var (
	benchFront = bytes.Join([][]byte{
		frame('Q', "SELECT abalance FROM pgbench_accounts WHERE aid = 42\x00"),
		frame('P', "\x00SELECT abalance FROM pgbench_accounts WHERE aid = $1\x00\x00\x00"),
		frame('B', "\x00\x00\x00\x00\x00\x01\x00\x00\x00\x0242\x00\x00"),
		frame('D', "P\x00"),
		frame('E', "\x00\x00\x00\x00\x00"),
		frame('S', ""),
	}, nil)
	benchBack = bytes.Join([][]byte{
		frame('T', "\x00\x01abalance\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x17\x00\x04\xff\xff\xff\xff\x00\x00"),
		frame('D', "\x00\x01\x00\x00\x00\x010"),
		frame('C', "SELECT 1\x00"),
		frame('Z', "I"),
		frame('1', ""), frame('2', ""),
		frame('T', "\x00\x01abalance\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x17\x00\x04\xff\xff\xff\xff\x00\x00"),
		frame('D', "\x00\x01\x00\x00\x00\x010"),
		frame('C', "SELECT 1\x00"),
		frame('Z', "I"),
	}, nil)
)

const benchTx = 1000

// BenchmarkFrontendPump pushes pipelined simple Queries and extended
// Parse/Bind/Describe/Execute/Sync batches through the client-to-upstream
// pump in memory; allocs/op shows the fast path allocates nothing per
// message.
func BenchmarkFrontendPump(b *testing.B) {
	in := bytes.Repeat(benchFront, benchTx)
	b.SetBytes(int64(len(in)))
	b.ReportAllocs()
	for b.Loop() {
		s, _, _ := memSession(b, in, nil)
		_ = s.frontendPump()
	}
}

// BenchmarkBackendPump pushes the answers to those requests through the
// upstream-to-client pump in memory, the requests having gone through the
// frontend pump first (untimed), so that the request tracker pops what it
// pushed.
func BenchmarkBackendPump(b *testing.B) {
	front := bytes.Repeat(benchFront, benchTx)
	in := bytes.Repeat(benchBack, benchTx)
	b.SetBytes(int64(len(in)))
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		s, _, _ := memSession(b, front, in)
		_ = s.frontendPump()
		b.StartTimer()
		s.backendPump()
		if s.track.lost || s.track.pending != 0 {
			b.Fatalf("tracker lost=%v pending=%d after a consistent exchange", s.track.lost, s.track.pending)
		}
	}
}
