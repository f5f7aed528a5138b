package proxy

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/pgfence"
	"github.com/jackc/pgx/v5/pgproto3"
)

// The gate runs once per session, after the upstream authenticated the
// client and before the client's first ReadyForQuery: two Query messages in
// one write on the session's own upstream connection (see gatePrelude),
// whose answers the proxy consumes. It asks PostgreSQL two things, in one
// round trip:
//
//   - whether the session's role could switch enforcement off
//     (pgfence.PrivilegeQuery; skipped with Config.AllowPrivilegedRoles), and
//   - whether the fencegate schema of the database is sound (pgfence.HealthQuery).
//
// Both statements run in one read-only transaction with search_path pinned
// to pg_catalog and the gate's own timeouts (SET LOCAL), so that nothing
// the client set up (a search_path in the startup options or in ALTER ROLE
// ... SET, objects of its own named like catalog functions or operators, a
// short statement_timeout, a serializable default) changes what they
// compute or whether they finish; SET LOCAL ends with that transaction, so
// the client's session starts with exactly the settings it asked for.
// Nothing of the gate reaches the client but a ParameterStatus the server
// may report.

// gateTimeout bounds each gate statement on the server (statement_timeout
// and lock_timeout), below the startup timeout.
const gateTimeout = "10s"

// refusal is a session the gate refuses: the FATAL error the client gets.
type refusal struct {
	reason string // metric label: privileged_role, schema, check_failed
	code   string
	msg    string
	hint   string
	detail []string // logged
}

func (r *refusal) Error() string { return r.msg }

// gate runs the startup check and returns the transaction status to give
// the client in its first ReadyForQuery. A schema problem is reported (or,
// with an admin connection, repaired) before a role problem: against an
// unsound schema the role check means little, and the version 1 schema
// belonged to the application role itself, which the upgrade changes.
func (s *session) gate() (byte, error) {
	begun := time.Now()
	if r := s.checkServerVersion(); r != nil {
		return 0, r
	}
	c, err := s.check()
	if err != nil {
		return 0, err
	}
	if len(c.problems) > 0 && s.p.repairer != nil {
		if r, err := s.judged(begun, &c); r != nil || err != nil {
			if r == nil {
				return 0, err
			}
			return 0, r
		}
	}
	s.p.metrics.GateSeconds.Observe(time.Since(begun).Seconds())
	if len(c.problems) > 0 {
		return 0, &refusal{
			reason: "schema",
			code:   fencegate.CodeSchemaInvalid,
			msg: fmt.Sprintf("fencegate: the fencegate schema of database %q is not sound, so the proxy refuses sessions until it is repaired: %s",
				s.database, strings.Join(c.problems, "; ")),
			hint: `An administrator repairs it as the problems say ("fencegate schema status --db DSN" lists them again), ` +
				`or starts the proxy with --admin-upstream so that it repairs the schema itself.`,
			detail: c.problems,
		}
	}
	if len(c.privileges) > 0 {
		return 0, &refusal{
			reason: "privileged_role",
			code:   fencegate.CodePrivilegedRole,
			msg: fmt.Sprintf("fencegate: this proxy admits application roles only, and %s",
				strings.Join(c.privileges, "; ")),
			hint: `Connect as an application role: not a superuser, without CREATEROLE, not the owner of a protected table or of anything in schema fencegate, ` +
				`not a member of such a role, holding only the grants "fencegate schema install --grant ROLE" gives. ` +
				`To admit privileged roles through this proxy, start it with --allow-privileged-roles.`,
			detail: c.privileges,
		}
	}
	return c.status, nil
}

// judged handles a session whose own check found the schema unsound, with
// an admin connection: the proxy asks its admin connection, whose verdict
// alone decides a repair (see repairer.judge). It returns the refusal for
// the session, or nil with c updated by a check the session ran again after
// a repair (whose problems, if any, refuse it as usual).
func (s *session) judged(begun time.Time, c *checked) (*refusal, error) {
	v := s.p.repairer.judge(context.Background(), s.database, begun)
	at := func(t time.Time) string { return t.UTC().Format(time.RFC3339) }
	schemaRefusal := func(msg, hint string, detail []string) *refusal {
		return &refusal{reason: "schema", code: fencegate.CodeSchemaInvalid, msg: msg, hint: hint, detail: detail}
	}
	switch {
	case v.err != nil:
		problems := v.problems
		if len(problems) == 0 {
			problems = c.problems
		}
		return schemaRefusal(
			fmt.Sprintf("fencegate: the fencegate schema of database %q is not sound (%s), and the proxy could not repair it through its admin connection: %v",
				s.database, strings.Join(problems, "; "), v.err),
			`Check the role and the reach of the proxy's --admin-upstream, or repair the schema with "fencegate schema upgrade --db DSN".`,
			problems), nil
	case len(v.problems) > 0:
		hint := fmt.Sprintf(`The proxy's admin connection found these problems at %s and tried no repair: it repairs at most once every %s, and its last repair began at %s. `,
			at(v.checked), s.p.cfg.RepairInterval, at(v.tried))
		if v.repaired {
			hint = fmt.Sprintf(`The proxy repaired what "fencegate schema upgrade" repairs at %s, and its admin connection still finds these problems. `, at(v.tried))
		}
		hint += `An administrator fixes them as the problems say ("fencegate schema status --db DSN" lists them again).`
		return schemaRefusal(
			fmt.Sprintf("fencegate: the fencegate schema of database %q is not sound, so the proxy refuses sessions until it is repaired: %s",
				s.database, strings.Join(v.problems, "; ")), hint, v.problems), nil
	case v.repaired && v.tried.After(begun):
		// Repaired since this session looked: look again, on its session.
		again, err := s.check()
		if err != nil {
			return nil, err
		}
		*c = again
		if len(c.problems) == 0 {
			return nil, nil
		}
	}
	// The admin connection finds the schema sound and this session does
	// not: its own settings changed what the check reads (or the schema
	// changed since the admin connection looked, less than RepairInterval
	// ago).
	done := "Nothing was repaired for this session."
	if v.repaired && v.tried.After(begun) {
		done = fmt.Sprintf("The proxy repaired the schema at %s; this session still finds problems.", at(v.tried))
	}
	return schemaRefusal(
		fmt.Sprintf("fencegate: this session's check of the fencegate schema of database %q found problems that the proxy's own check, on its admin connection at %s, does not find: %s",
			s.database, at(v.checked), strings.Join(c.problems, "; ")),
		`Settings of the session (startup options, ALTER ROLE or ALTER DATABASE ... SET) can change how PostgreSQL prints what the check compares: `+
			`connect without them, or run "fencegate schema status --db DSN". `+done,
		c.problems), nil
}

// checkServerVersion refuses a session to an upstream whose PostgreSQL major
// fencegate does not support (pgfence.MinMajor to MaxMajor; a newer one with
// Config.AllowNewerServer), from the server_version the server reported at
// startup. The schema's checks are written against the catalogs of the
// supported majors: on another one they may pass without meaning what they
// say. An upstream that reports no server_version (every PostgreSQL since
// 7.4 does; so does PgBouncer) is left to the health query.
func (s *session) checkServerVersion() *refusal {
	reported := s.params["server_version"]
	if reported == "" {
		return nil
	}
	v, err := pgfence.ParseServerVersion(reported)
	if err == nil {
		err = v.Check(s.p.cfg.AllowNewerServer)
	}
	if err == nil {
		return nil
	}
	hint := "Run the database on " + pgfence.SupportedRange + "."
	if errors.Is(err, pgfence.ErrUntestedServer) {
		hint += " To admit sessions to a newer one regardless, start the proxy with --allow-newer-postgres."
	}
	return &refusal{
		reason: "server_version",
		code:   fencegate.CodeSchemaInvalid,
		msg:    "fencegate: " + strings.TrimPrefix(err.Error(), "pgfence: "),
		hint:   hint,
		detail: []string{"server_version " + reported},
	}
}

// checked is what the gate's query found.
type checked struct {
	problems   []string // the schema's, one per row of the health query
	privileges []string // why the role could switch enforcement off
	status     byte     // the final ReadyForQuery's
}

// gatePrelude opens the gate's transaction and pins what its statements
// depend on. It is a Query of its own, sent in the same write as the
// checks: the client's statement_timeout (armed when a Query arrives, and
// running while the server parses the whole string) then only bounds this
// short one, and the checks run under the gate's own timeouts. The BEGIN
// and the first SET still run under the client's statement_timeout (the
// server arms it per statement); a client that asks for one of a few
// milliseconds at startup can be refused with 57014 on a loaded server,
// as its own first statements would be cancelled there.
var gatePrelude = gateBegin + gatePins

const gateBegin = "BEGIN ISOLATION LEVEL READ COMMITTED READ ONLY"

// gatePins sets the gate's timeouts and pgfence.PinnedSettings (the
// search_path among them) for the gate's transaction: whatever the client
// set at startup or its role's defaults say, the checks read and print the
// catalogs as on the admin connection.
var gatePins = "; SET LOCAL statement_timeout = '" + gateTimeout + "'; " +
	"SET LOCAL lock_timeout = '" + gateTimeout + "'; " + pgfence.PinSQL(true)

// gatePrelude17 is gatePrelude on PostgreSQL 17 and later, with one more
// statement right after BEGIN:
// transaction_timeout (17) is armed at BEGIN with the session's value, which
// the client chose (startup options, ALTER ROLE ... SET), and would end the
// gate's transaction, refusing the session. Setting it LOCAL to 0 disarms it
// for this transaction (a positive value would leave the client's timer
// running); the gate's statements stay bounded by its statement_timeout.
var gatePrelude17 = gateBegin + "; SET LOCAL transaction_timeout = 0" + gatePins

// serverMajor is the upstream's major version from the server_version it
// reported at startup, 0 when it reported none or one that does not parse.
func (s *session) serverMajor() int {
	v, err := pgfence.ParseServerVersion(s.params["server_version"])
	if err != nil {
		return 0
	}
	return v.Major()
}

// check runs the gate's queries: two Query messages in one write, one
// round trip. Both end in one transaction that sets nothing beyond itself.
func (s *session) check() (checked, error) {
	var checks []string
	health := !s.p.trusted(&s.p.soundAt, s.database)
	if health {
		checks = append(checks, trimSQL(pgfence.HealthQuery))
	}
	// The verdict on a role is cached under the role the server
	// authenticated (never the user the client named) and the database
	// the server connected to. Without a session_authorization from the
	// server (a pooler in between that does not pass it on) nothing is
	// cached: the role is checked at every session.
	roleKey := s.database + "\x00" + s.role
	cacheable := s.role != ""
	role := !s.p.cfg.AllowPrivilegedRoles && !(cacheable && s.p.trusted(&s.p.admittedAt, roleKey))
	if role {
		checks = append(checks, trimSQL(pgfence.PrivilegeQuery))
	}
	if len(checks) == 0 {
		return checked{status: s.startStatus}, nil
	}
	began := time.Now()
	prelude := gatePrelude
	if s.serverMajor() >= 17 {
		prelude = gatePrelude17
	}
	i := strings.Count(prelude, ";") + 1 // its statements' answers come first
	rows, status, err := s.gateQuery(prelude, strings.Join(checks, ";\n")+";\nCOMMIT")
	if err != nil {
		return checked{}, err
	}
	// Statements: the prelude's, then the checks in order, then COMMIT.
	c := checked{status: status}
	if health {
		c.problems = rows[i]
		i++
		// A session's failed check does not end the trust others earned:
		// its settings may be what failed it (see judged), and a passed
		// check is trusted for CheckInterval in any case.
		if len(c.problems) == 0 {
			s.p.checked(&s.p.soundAt, s.database, began, true)
		}
	}
	if role {
		c.privileges = rows[i]
		// Trusted only together with a sound schema: the role check is
		// about the objects of that schema.
		if cacheable {
			s.p.checked(&s.p.admittedAt, roleKey, began, len(c.privileges) == 0 && len(c.problems) == 0)
		}
	}
	return c, nil
}

// trusted reports whether a check of key that passed began less than
// Config.CheckInterval ago.
func (p *Proxy) trusted(m *sync.Map, key string) bool {
	if p.cfg.CheckInterval <= 0 {
		return false
	}
	v, ok := m.Load(key)
	return ok && time.Since(v.(time.Time)) < p.cfg.CheckInterval
}

// checked records the outcome of a check of key that began at began.
func (p *Proxy) checked(m *sync.Map, key string, began time.Time, passed bool) {
	if passed && p.cfg.CheckInterval > 0 {
		m.Store(key, began)
	} else {
		m.Delete(key)
	}
}

// trimSQL drops a trailing semicolon and white space from a statement.
func trimSQL(q string) string {
	return strings.TrimRight(strings.TrimSpace(q), "; \t\r\n")
}

// gateQuery sends each of queries as a simple Query, in one write, and
// reads their answers up to the last ReadyForQuery. It returns the first
// column of each row, per statement (counted across the queries), and the
// final transaction status. An error of a statement is returned as a
// refusal.
func (s *session) gateQuery(queries ...string) ([][]string, byte, error) {
	var msg []byte
	for _, q := range queries {
		msg = queryMsg(msg, q)
	}
	if _, err := s.upstreamWriter.Write(msg); err != nil {
		return nil, 0, err
	}
	if err := s.upstreamWriter.Flush(); err != nil {
		return nil, 0, err
	}
	var rows [][]string
	var params [][2]string // ParameterStatus (name, value) in the order received
	stmt, ready := 0, 0
	var qerr *pgproto3.ErrorResponse
	for {
		typ, size, err := s.upstreamFrames.peekHeader()
		if err != nil {
			return nil, 0, fmt.Errorf("read the gate's answer: %w", err)
		}
		body, err := s.upstreamFrames.body(size)
		if err != nil {
			return nil, 0, fmt.Errorf("read the gate's answer: %w", err)
		}
		switch typ {
		case 'T':
		case 'D':
			var d pgproto3.DataRow
			if err := d.Decode(body); err != nil {
				return nil, 0, fmt.Errorf("decode the gate's answer: %w", err)
			}
			for len(rows) <= stmt {
				rows = append(rows, nil)
			}
			if len(d.Values) > 0 && d.Values[0] != nil {
				rows[stmt] = append(rows[stmt], string(d.Values[0]))
			}
		case 'C', 'I':
			stmt++
			for len(rows) < stmt {
				rows = append(rows, nil)
			}
		case 'E':
			if qerr == nil {
				if qerr, err = decodeError(body); err != nil {
					return nil, 0, fmt.Errorf("decode the gate's answer: %w", err)
				}
			}
		case 'N', 'A':
			// A notice or notification raised by the gate's statements is
			// the proxy's, not the client's.
		case 'S':
			// Held back until the gate's transaction ends: its SET LOCALs
			// change parameters the server reports (search_path, since
			// PostgreSQL 18) and COMMIT reports them back. Only what
			// differs in the end from what the client was last told is
			// passed on (see forwardParams); a refused session gets none.
			name, rest, ok1 := cstring(body)
			value, _, ok2 := cstring(rest)
			if !ok1 || !ok2 {
				return nil, 0, fmt.Errorf("upstream sent a malformed ParameterStatus to the gate's query")
			}
			params = append(params, [2]string{string(name), string(value)})
		case 'Z':
			if len(body) != 1 {
				return nil, 0, fmt.Errorf("upstream sent a bad ReadyForQuery")
			}
			if ready++; ready < len(queries) {
				continue
			}
			if qerr != nil {
				return nil, 0, &refusal{
					reason: "check_failed",
					code:   qerr.Code,
					msg:    "fencegate: the proxy could not check the session's role and the fencegate schema: " + qerr.Message,
					hint:   qerr.Hint,
				}
			}
			if body[0] != 'I' {
				return nil, 0, fmt.Errorf("the gate's query left the session in transaction status %q", body[0])
			}
			if err := s.forwardParams(params); err != nil {
				return nil, 0, err
			}
			return rows, body[0], nil
		default:
			return nil, 0, fmt.Errorf("upstream sent message type %q to the gate's query", typ)
		}
	}
}

// forwardParams passes on the last value of each parameter the server
// reported during the gate's query when it differs from the value the client
// was last told, in the order the server reported them.
func (s *session) forwardParams(params [][2]string) error {
	last := make(map[string]int, len(params))
	for i, p := range params {
		last[p[0]] = i
	}
	for i, p := range params {
		if last[p[0]] != i || s.params[p[0]] == p[1] {
			continue
		}
		if s.params == nil {
			s.params = make(map[string]string)
		}
		s.params[p[0]] = p[1]
		body := append(append(append(append([]byte(nil), p[0]...), 0), p[1]...), 0)
		if err := writeMsg(s.clientWriter, 'S', body); err != nil {
			return err
		}
	}
	return nil
}

// refuse ends a session the gate refused (or could not check): a FATAL
// ErrorResponse to the client, a Terminate upstream.
func (s *session) refuse(err error) {
	var r *refusal
	if !errors.As(err, &r) {
		s.startupFailed(err)
		return
	}
	s.p.metrics.SessionsRefused.WithLabelValues(r.reason).Inc()
	s.log.Warn("session refused", "reason", r.reason, "sqlstate", r.code, "problems", r.detail, "message", r.msg)
	_ = writeMsg(s.upstreamWriter, 'X', nil)
	_ = s.upstreamWriter.Flush()
	_ = s.client.SetWriteDeadline(time.Now().Add(time.Second))
	_ = writeMsg(s.clientWriter, 'E', errorBody("FATAL", r.code, r.msg, r.hint))
	_ = s.clientWriter.Flush()
}
