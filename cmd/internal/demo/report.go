package demo

import (
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/cmd/internal/devstack"
	"github.com/fencegate/fencegate/cmd/internal/timeline"
	"github.com/fencegate/fencegate/pgfence/pgfencetest/fenceddb"
)

func printIntro(w io.Writer, cfg *Config, st *devstack.Stack) {
	fmt.Fprintln(w, "The paused lock holder (Kleppmann, \"How to do distributed locking\"), replayed with real processes.")
	fmt.Fprintln(w)
	fmt.Fprintf(w, "  PostgreSQL   %s (%s), database %s, dropped at the end\n", hostOf(st.Postgres.DSN), st.Postgres.Source, devstack.DatabaseOf(st.DB.AdminDSN))
	fmt.Fprintf(w, "  roles        clients log in as %s (%s on the tables, may take fences);\n", st.DB.App, fenceddb.AppPrivileges)
	fmt.Fprintf(w, "               %s (NOLOGIN) owns schema fencegate and the tables; both dropped at the end\n", st.DB.Owner)
	if cfg.Redlock {
		fmt.Fprintf(w, "  Redis        five masters for Redlock: %s\n", strings.Join(st.RedisAddrs(), " "))
	} else {
		fmt.Fprintf(w, "  Redis        %s (%s)\n", st.Redis.Addr, st.Redis.Source)
	}
	fmt.Fprintf(w, "  tokens       3-node Raft group: %s\n", strings.Join(st.Tokens.URLs, " "))
	fmt.Fprintf(w, "  proxy        %s -> PostgreSQL (a gate: admits the application role only)\n", st.ProxyAddr)
	fmt.Fprintf(w, "  lock TTL     %v\n", cfg.TTL)
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Alice's order 42 ($49.99) must be charged once. Two client processes each take the lock")
	fmt.Fprintln(w, "on it, read the order, and charge it if it is unpaid.")
	if cfg.Redlock {
		fmt.Fprintln(w, "Client 1 locks masters 1-3 (4 and 5 are cut off from it); master 3 restarts without")
		fmt.Fprintln(w, "persistence; client 2 then locks masters 3-5: both hold a valid Redlock at once.")
	} else {
		fmt.Fprintln(w, "Client 1 reads, then is frozen (SIGSTOP) past its TTL; client 2 takes the lock, charges;")
		fmt.Fprintln(w, "client 1 resumes and charges from what it read before the pause.")
	}
	fmt.Fprintln(w, "Three runs: (a) straight to PostgreSQL, tables not protected, no fence; (b) through the proxy,")
	fmt.Fprintln(w, "tables protected (fencegate.protect), each transaction fenced with the lock's token; (c) as (b)")
	fmt.Fprintln(w, "but straight to PostgreSQL: the fence is enforced by PostgreSQL itself, not by the proxy.")
	fmt.Fprintln(w)
}

func hostOf(dsn string) string {
	if i := strings.Index(dsn, "@"); i >= 0 {
		dsn = dsn[i+1:]
	}
	if i := strings.IndexAny(dsn, "/?"); i >= 0 {
		dsn = dsn[:i]
	}
	return dsn
}

func runCaption(r *Run) string {
	o := r.Order
	switch {
	case o.Charges > 1:
		return fmt.Sprintf("Order 42 charged %d times: %s taken for a %s order. The stale write landed.",
			o.Charges, money(o.ChargedCents), money(o.AmountCents))
	case o.Charges == 1 && r.Write1.SQLState == fencegate.CodeStaleToken:
		return fmt.Sprintf("Order 42 charged once (%s). Client 1's stale write (token %d < %d) was rejected with FG001.",
			money(o.ChargedCents), r.Token1, r.Token2)
	case o.Charges == 1:
		return fmt.Sprintf("Order 42 charged once (%s).", money(o.ChargedCents))
	}
	return fmt.Sprintf("Order 42 charged %d times.", o.Charges)
}

func money(cents int64) string { return fmt.Sprintf("$%d.%02d", cents/100, cents%100) }

func printRun(w io.Writer, r *Run) {
	_ = r.Timeline.WriteText(w, 72, 0, true)
	fmt.Fprintln(w)
	if r.Write1.Attempted && !r.Write1.OK {
		fmt.Fprintf(w, "  client 1's write failed: SQLSTATE %s: %s\n", r.Write1.SQLState, r.Write1.Message)
	}
	fmt.Fprintf(w, "  client 1's last lease check before its write: %s\n", heldText(r.Held1))
	if len(r.Masters) > 0 {
		fmt.Fprintf(w, "  when client 2 got the lock: client 1's key on %s, client 2's on %s (double grant: %v)\n",
			holdersText(r.Masters, r.Masters[0]), holdersText(r.Masters, r.Masters[len(r.Masters)-1]), r.DoubleGrant())
	}
	fmt.Fprintf(w, "  in the database: order 42 is %s, %d charge(s), %s charged\n\n", r.Order.State, r.Order.Charges, money(r.Order.ChargedCents))
}

// holdersText lists the masters (1-based) whose value is v.
func holdersText(values []string, v string) string {
	var ms []string
	for i, x := range values {
		if x == v && v != "" {
			ms = append(ms, fmt.Sprint(i+1))
		}
	}
	if len(ms) == 0 {
		return "no master"
	}
	return "masters " + strings.Join(ms, ",")
}

func heldText(held bool) string {
	if held {
		return "still valid (so checking did not help)"
	}
	return "expired"
}

func writePicture(res *Result, cfg *Config) error {
	f, err := os.Create(res.Picture)
	if err != nil {
		return fmt.Errorf("write picture: %w", err)
	}
	title := "The paused lock holder, with and without fencing"
	if cfg.Redlock {
		title = "Redlock double grant after a master restart, with and without fencing"
	}
	if err := timeline.WriteSVG(f, title, res.Unprotected.Timeline, res.Proxied.Timeline, res.Direct.Timeline); err != nil {
		f.Close()
		return fmt.Errorf("write picture: %w", err)
	}
	return f.Close()
}

func printVerdict(w io.Writer, res *Result) {
	a := res.Unprotected
	fmt.Fprintln(w, "Verdict")
	if a.Order.Charges > 1 {
		fmt.Fprintf(w, "  %-25s the stale write landed; Alice paid %s for a %s order.\n", "(a) unprotected, direct:", money(a.Order.ChargedCents), money(a.Order.AmountCents))
	} else {
		fmt.Fprintf(w, "  %-25s %d charge(s); this time the stale write did no damage.\n", "(a) unprotected, direct:", a.Order.Charges)
	}
	for _, r := range []struct {
		name string
		run  *Run
	}{{"(b) protected, proxy:", &res.Proxied}, {"(c) protected, direct:", &res.Direct}} {
		p := r.run
		if p.rejected() {
			fmt.Fprintf(w, "  %-25s the stale write (token %d < %d) was rejected with FG001; Alice paid %s once.\n", r.name, p.Token1, p.Token2, money(p.Order.ChargedCents))
		} else {
			fmt.Fprintf(w, "  %-25s the stale write was NOT rejected (%d charge(s), client 1: %+v).\n", r.name, p.Order.Charges, p.Write1)
		}
	}
	if res.StaleWriteRejected() {
		fmt.Fprintln(w, "  PASS: fencing made the paused holder harmless, with or without the proxy.")
	} else {
		fmt.Fprintln(w, "  FAIL")
	}
	fmt.Fprintf(w, "  picture: %s\n", res.Picture)
}
