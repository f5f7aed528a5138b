package demo

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/fencegate/fencegate/cmd/internal/devstack"
	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
)

// stackPrefix starts the names of the database and the two roles of a
// demo run's stack (devstack.StartThrowaway): PostgreSQL found or
// throwaway, Redis (one server, or masters for Redlock), a 3-node token
// cluster in this process and the proxy, all gone at the end.
const stackPrefix = "fencegate_demo_"

// appDSN connects to the demo database as the application role, through
// the proxy when proxied, else straight to PostgreSQL. The password is not
// in it: the clients get it in their environment.
func appDSN(st *devstack.Stack, proxied bool) string {
	if proxied {
		return st.DB.AppDSN(st.ProxyAddr)
	}
	return st.DB.AppDSN("")
}

// lockHolders reads the lock key key on every Redlock master.
func lockHolders(ctx context.Context, st *devstack.Stack, key string) ([]string, error) {
	out := make([]string, len(st.Masters))
	for i, m := range st.Masters {
		c := redis.NewClient(m.Options)
		v, err := c.Get(ctx, key).Result()
		c.Close()
		switch {
		case errors.Is(err, redis.Nil):
		case err != nil:
			return nil, fmt.Errorf("read lock on Redis master %d: %w", i+1, err)
		default:
			out[i] = v
		}
	}
	return out, nil
}

// sessions describes the PostgreSQL sessions on the demo database: who
// waits for what, and who blocks it. A client that got stuck adds it to its
// error.
func sessions(st *devstack.Stack) string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, cerr := pgx.Connect(ctx, st.Postgres.DSN)
	if cerr != nil {
		return "; PostgreSQL sessions unknown: " + cerr.Error()
	}
	defer conn.Close(context.Background())
	db := devstack.DatabaseOf(st.DB.AdminDSN)
	rows, qerr := conn.Query(ctx, `SELECT pid, coalesce(client_port, 0), coalesce(state, ''),
		coalesce(wait_event_type || ':' || wait_event, ''), pg_blocking_pids(pid)::text,
		coalesce(extract(epoch FROM now() - xact_start)::text, '-'), left(query, 120)
		FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid() ORDER BY pid`, db)
	if qerr != nil {
		return "; PostgreSQL sessions unknown: " + qerr.Error()
	}
	var b strings.Builder
	b.WriteString("; PostgreSQL sessions on " + db + " (pid, client port, state, waits for, blocked by, transaction age s, last query):")
	for rows.Next() {
		var pid, port int
		var state, wait, blockers, age, query string
		if rows.Scan(&pid, &port, &state, &wait, &blockers, &age, &query) == nil {
			fmt.Fprintf(&b, "\n  %d %d %s %s %s %s %q", pid, port, state, wait, blockers, age, query)
		}
	}
	if rows.Err() != nil {
		b.WriteString("\n  " + rows.Err().Error())
	}
	return b.String()
}
