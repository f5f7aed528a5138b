// Package fencehttp makes an HTTP service that writes to PostgreSQL a fenced
// resource of its own: a net/http middleware that reads the Fencing-Resource
// and Fencing-Token headers (as "fencegate relay" sends them, or any client
// that holds a fencegate lock), runs fencegate.fence in the handler's own
// PostgreSQL transaction, and answers 409 Conflict to a stale token before
// the handler runs. The handler gets the fenced transaction (Tx) and writes
// through it; the middleware commits after the handler returns and only
// then sends the handler's answer.
//
// An Idempotency-Key is deduplicated in that same transaction: the first
// request with a key (per resource) runs the handler and stores its answer
// with its writes, in one commit; a later request with the key gets the
// stored answer again (header Idempotent-Replayed: true) and runs nothing.
// Two requests with one key on one resource cannot run at once: the second
// waits at the fence for the first one's transaction. An answer of 500 or
// above rolls everything back, key included, so a retry runs again.
//
// The database needs schema fencegate (the service's role granted with
// "fencegate schema install --grant ROLE") and the key table, created once
// with TableSQL and best protected by resource ("fencegate protect
// fencegate_idempotency --resource resource"), so that only a fenced
// transaction writes it.
package fencehttp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"

	"github.com/fencegate/fencegate"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// TableSQL creates the table that keeps each Idempotency-Key's answer.
const TableSQL = `CREATE TABLE IF NOT EXISTS fencegate_idempotency (
	resource     text COLLATE "C" NOT NULL,
	key          text NOT NULL,
	status       integer,
	content_type text,
	body         bytea,
	created_at   timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (resource, key)
)`

// Options configures Middleware.
type Options struct {
	// Begin starts the transaction of one request, e.g. a pgxpool.Pool's
	// Begin. Required.
	Begin func(ctx context.Context) (pgx.Tx, error)
	// Table is the key table (default fencegate_idempotency).
	Table string
	// Optional lets requests without Fencing-Resource through, unfenced
	// and without a transaction (Tx returns nil). Default: 400.
	Optional bool
	// Logger receives the requests refused for a server-side reason.
	Logger *slog.Logger
}

type ctxKey struct{}

// Tx is the fenced transaction of the request the handler serves, nil for
// an unfenced request (Options.Optional). The handler must not commit or
// roll it back.
func Tx(r *http.Request) pgx.Tx {
	tx, _ := r.Context().Value(ctxKey{}).(pgx.Tx)
	return tx
}

// Middleware returns the fencing middleware.
func Middleware(opts Options) func(http.Handler) http.Handler {
	if opts.Begin == nil {
		panic("fencehttp: Options.Begin is required")
	}
	table := pgx.Identifier{"fencegate_idempotency"}.Sanitize()
	if opts.Table != "" {
		table = pgx.Identifier{opts.Table}.Sanitize()
	}
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			rawRes, rawTok := r.Header.Get("Fencing-Resource"), r.Header.Get("Fencing-Token")
			if rawRes == "" && rawTok == "" && opts.Optional {
				next.ServeHTTP(w, r)
				return
			}
			resource, err := url.PathUnescape(rawRes)
			if err != nil || resource == "" {
				http.Error(w, "fencing: missing or malformed Fencing-Resource header", http.StatusBadRequest)
				return
			}
			token, err := strconv.ParseInt(rawTok, 10, 64)
			if err != nil || token < 0 {
				http.Error(w, "fencing: missing or malformed Fencing-Token header (a non-negative integer)", http.StatusBadRequest)
				return
			}
			ctx := r.Context()
			tx, err := opts.Begin(ctx)
			if err != nil {
				log.Warn("fencehttp: begin", "err", err)
				http.Error(w, "fencing: database unavailable", http.StatusServiceUnavailable)
				return
			}
			defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // a no-op after Commit
			if proof := r.Header.Get("Fencing-Proof"); proof != "" {
				_, err = tx.Exec(ctx, fencegate.FenceSignedSQL, resource, token, proof)
			} else {
				_, err = tx.Exec(ctx, fencegate.FenceSQL, resource, token)
			}
			if err != nil {
				refuse(w, log, err)
				return
			}
			key := r.Header.Get("Idempotency-Key")
			if key != "" {
				var fresh bool
				err := tx.QueryRow(ctx, "INSERT INTO "+table+" (resource, key) VALUES ($1, $2) ON CONFLICT DO NOTHING RETURNING true", resource, key).Scan(&fresh)
				if errors.Is(err, pgx.ErrNoRows) {
					var status int
					var ctype *string
					var body []byte
					if err := tx.QueryRow(ctx, "SELECT status, content_type, body FROM "+table+" WHERE resource = $1 AND key = $2", resource, key).Scan(&status, &ctype, &body); err != nil {
						refuse(w, log, err)
						return
					}
					if ctype != nil {
						w.Header().Set("Content-Type", *ctype)
					}
					w.Header().Set("Idempotent-Replayed", "true")
					w.WriteHeader(status)
					w.Write(body) //nolint:errcheck
					return
				}
				if err != nil {
					refuse(w, log, err)
					return
				}
			}
			rec := &recorder{header: http.Header{}, status: http.StatusOK}
			next.ServeHTTP(rec, r.WithContext(context.WithValue(ctx, ctxKey{}, tx)))
			if rec.status >= 500 {
				tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck
				rec.flush(w)
				return
			}
			if key != "" {
				if _, err := tx.Exec(ctx, "UPDATE "+table+" SET status = $3, content_type = $4, body = $5 WHERE resource = $1 AND key = $2",
					resource, key, rec.status, nullable(rec.header.Get("Content-Type")), rec.body.Bytes()); err != nil {
					refuse(w, log, err)
					return
				}
			}
			if err := tx.Commit(context.WithoutCancel(ctx)); err != nil {
				refuse(w, log, err)
				return
			}
			rec.flush(w)
		})
	}
}

// refuse answers for an error of the fence or the database: 409 to a stale
// token, 400 to misuse (a bad resource name or proof), 503 to a fence
// timeout or an unavailable database, 500 otherwise.
func refuse(w http.ResponseWriter, log *slog.Logger, err error) {
	var pg *pgconn.PgError
	code := ""
	if errors.As(err, &pg) {
		code = pg.Code
	}
	switch code {
	case fencegate.CodeStaleToken:
		http.Error(w, "fencing: stale token: "+pg.Message, http.StatusConflict)
	case fencegate.CodeMisuse, fencegate.CodeBadProof:
		http.Error(w, "fencing: "+pg.Message, http.StatusBadRequest)
	case fencegate.CodeFenceTimeout, "40001", "40P01":
		w.Header().Set("Retry-After", "1")
		http.Error(w, "fencing: busy, retry", http.StatusServiceUnavailable)
	default:
		log.Warn("fencehttp: request failed", "err", err)
		http.Error(w, fmt.Sprintf("fencing: database error (SQLSTATE %s)", code), http.StatusInternalServerError)
	}
}

func nullable(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// recorder holds the handler's answer until the transaction committed.
type recorder struct {
	header http.Header
	status int
	wrote  bool
	body   bytes.Buffer
}

func (r *recorder) Header() http.Header { return r.header }
func (r *recorder) WriteHeader(code int) {
	if !r.wrote {
		r.status, r.wrote = code, true
	}
}
func (r *recorder) Write(b []byte) (int, error) {
	r.wrote = true
	return r.body.Write(b)
}

func (r *recorder) flush(w http.ResponseWriter) {
	for k, v := range r.header {
		w.Header()[k] = v
	}
	w.WriteHeader(r.status)
	w.Write(r.body.Bytes()) //nolint:errcheck
}
