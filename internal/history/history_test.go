package history

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/anishathalye/porcupine"
)

// synthetic builds a linearizable history of n operations by clients
// overlapping in time; tokens increase in the order the operations take
// effect.
func synthetic(n, clients int) []Op {
	rng := rand.New(rand.NewPCG(1, 2))
	var ops []Op
	var t int64
	var tok int64
	for i := 0; i < n; i++ {
		t += int64(rng.IntN(10) + 1)
		tok += int64(rng.IntN(3) + 1)
		// The operation takes effect at t; its call is a little earlier and
		// its return a little later, so operations overlap.
		ops = append(ops, Op{Client: i % clients, Resource: "r", Token: tok, Call: t - int64(rng.IntN(30)), Return: t + int64(rng.IntN(30))})
	}
	return ops
}

func TestCheckLinearizable(t *testing.T) {
	ops := synthetic(2000, 16)
	ops = append(ops, Op{Client: 3, Resource: "r", Err: errors.New("lost"), Call: 5, Return: 1 << 40})
	if err := CheckRealTime(ops); err != nil {
		t.Fatalf("CheckRealTime: %v", err)
	}
	if res, err := CheckTokens(ops); res != porcupine.Ok || err != nil {
		t.Fatalf("CheckTokens = %v, %v; want Ok", res, err)
	}
}

func TestCheckViolations(t *testing.T) {
	cases := []struct {
		name string
		ops  []Op
	}{
		{"stale token after return", []Op{{Client: 0, Token: 5, Call: 0, Return: 10}, {Client: 1, Token: 4, Call: 11, Return: 20}}},
		{"duplicate token", []Op{{Client: 0, Token: 5, Call: 0, Return: 10}, {Client: 1, Token: 5, Call: 5, Return: 20}}},
		{"equal token later", []Op{{Client: 0, Token: 7, Call: 0, Return: 10}, {Client: 1, Token: 7, Call: 30, Return: 40}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if err := CheckRealTime(tc.ops); !errors.Is(err, ErrNotLinearizable) {
				t.Fatalf("CheckRealTime = %v, want ErrNotLinearizable", err)
			}
			path := filepath.Join(t.TempDir(), "viz.html")
			res, err := CheckAndVisualize(tc.ops, path)
			if res != porcupine.Illegal || !errors.Is(err, ErrNotLinearizable) {
				t.Fatalf("CheckAndVisualize = %v, %v; want Illegal", res, err)
			}
			if fi, err := os.Stat(path); err != nil || fi.Size() == 0 {
				t.Fatalf("visualization not written: %v", err)
			}
		})
	}
}

// TestModelsAgree checks on many small random histories (linearizable or
// not) that TokenModelFor gives the same verdict as the plain TokenModel.
func TestModelsAgree(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	verdicts := map[bool]int{}
	for i := 0; i < 2000; i++ {
		n := rng.IntN(7) + 1
		ops := make([]Op, n)
		for j := range ops {
			call := int64(rng.IntN(20))
			ops[j] = Op{Client: j, Resource: "r", Token: int64(rng.IntN(8) + 1), Call: call, Return: call + int64(rng.IntN(10))}
		}
		plain := porcupine.CheckOperations(TokenModel, Operations(ops))
		res, _ := CheckTokens(ops)
		if plain != (res == porcupine.Ok) {
			t.Fatalf("history %+v: TokenModel says %v, TokenModelFor says %v", ops, plain, res)
		}
		if (CheckRealTime(ops) == nil) != plain {
			t.Fatalf("history %+v: TokenModel says %v, CheckRealTime disagrees", ops, plain)
		}
		verdicts[plain]++
	}
	if verdicts[true] == 0 || verdicts[false] == 0 {
		t.Fatalf("verdicts %v: want both kinds", verdicts)
	}
}

// TestCheckManyOverlapping is the shape group commit produces: 64 clients,
// each batch's tokens handed out in an order unrelated to call order.
func TestCheckManyOverlapping(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	var ops []Op
	var tok int64
	for batch := 0; batch < 100; batch++ {
		start := int64(batch * 100)
		perm := rng.Perm(64)
		for c := 0; c < 64; c++ {
			ops = append(ops, Op{Client: c, Resource: "r", Token: tok + int64(perm[c]) + 1, Call: start + int64(rng.IntN(90)), Return: start + 100 + int64(rng.IntN(90))})
		}
		tok += 64
	}
	if res, err := CheckTokens(ops); res != porcupine.Ok {
		t.Fatalf("CheckTokens = %v, %v; want Ok", res, err)
	}
}

func TestRecorderConcurrent(t *testing.T) {
	r := NewRecorder()
	done := make(chan struct{})
	for c := 0; c < 8; c++ {
		go func() {
			defer func() { done <- struct{}{} }()
			for i := 0; i < 100; i++ {
				h := r.Begin(c, fmt.Sprint("r", c))
				r.End(h, int64(c*1000+i+1), nil)
			}
		}()
	}
	for c := 0; c < 8; c++ {
		<-done
	}
	if got := len(r.Ops()); got != 800 {
		t.Fatalf("len(Ops()) = %d, want 800", got)
	}
	for _, op := range r.Ops() {
		if op.Return < op.Call {
			t.Fatalf("op returned before its call: %+v", op)
		}
	}
}

func BenchmarkCheckTokens(b *testing.B) {
	ops := synthetic(5000, 64)
	for b.Loop() {
		if res, err := CheckTokens(ops); res != porcupine.Ok {
			b.Fatal(res, err)
		}
	}
}

func ExampleCheckTokens() {
	r := NewRecorder()
	h := r.Begin(0, "orders/42")
	r.End(h, 7, nil)
	h = r.Begin(1, "orders/42")
	r.End(h, 9, nil)
	res, err := CheckTokens(r.Ops())
	fmt.Println(res, err)
	// Output: Ok <nil>
}
