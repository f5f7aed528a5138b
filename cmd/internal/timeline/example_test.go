package timeline_test

import (
	"os"
	"time"

	"github.com/fencegate/fencegate/cmd/internal/timeline"
)

func ExampleTimeline_WriteText() {
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

	tl := timeline.New("paused holder", t0)
	tl.AddLane("client 1", "client 2")
	tl.Span("client 1", timeline.Hold, at(0), at(1900), "token 33")
	tl.Span("client 1", timeline.Pause, at(200), at(1800), "SIGSTOP")
	tl.Mark("client 1", timeline.Expiry, at(1000), "TTL expired")
	tl.Span("client 2", timeline.Hold, at(1100), at(1500), "token 34")
	tl.Mark("client 2", timeline.Accepted, at(1400), "token 34 accepted")
	tl.Mark("client 1", timeline.Rejected, at(1850), "token 33 rejected: FG001")
	_ = tl.WriteText(os.Stdout, 40, 0, true)
	// Output:
	// paused holder
	//           0         0.5s      1s        1.5s
	// client 1  ====zzzzzzzzzzzzzzzz|zzzzzzzzzzzzzzzzzX=
	// client 2                        ======+==
	//           = holds lock   z paused   | TTL expired   + write accepted   X write rejected
	//
	//     0.000s  client 1  holds lock          token 33 (1.900s)
	//     0.200s  client 1  paused              SIGSTOP (1.600s)
	//     1.000s  client 1  TTL expired         TTL expired
	//     1.100s  client 2  holds lock          token 34 (0.400s)
	//     1.400s  client 2  write accepted      token 34 accepted
	//     1.850s  client 1  write rejected      token 33 rejected: FG001
}
