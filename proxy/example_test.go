package proxy_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/pgfence"
	"github.com/fencegate/fencegate/proxy"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// A fenced write through the proxy, and a stale one PostgreSQL rejects.
func Example() {
	db, app, drop := exampleDB()
	defer drop()
	p, err := proxy.New(proxy.Config{
		Listen:   "127.0.0.1:0",
		Upstream: "postgres://127.0.0.1:5432?sslmode=disable",
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := p.Start(); err != nil {
		log.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		p.Shutdown(ctx)
	}()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, "postgres://"+app+"@"+p.Addr()+"/"+db+"?sslmode=disable")
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close(ctx)
	write := func(token int64) error {
		return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			var accepted int64
			if err := tx.QueryRow(ctx, fencegate.FenceSQL, "order:42", token).Scan(&accepted); err != nil {
				return err
			}
			fmt.Println("accepted", accepted)
			_, err := tx.Exec(ctx, "UPDATE orders SET state = 'paid' WHERE id = 42")
			return err
		})
	}
	_ = write(34)
	err = write(33)
	fmt.Println("stale:", code(err))
	_, err = conn.Exec(ctx, "UPDATE orders SET state = 'unfenced' WHERE id = 42")
	fmt.Println("unfenced:", code(err))
	// Output:
	// accepted 34
	// stale: FG001
	// unfenced: FG002
}

// The defaults New applies, and a Config checked before New.
func ExampleDefaultConfig() {
	cfg := proxy.DefaultConfig()
	fmt.Println(cfg.Listen, cfg.CheckInterval, cfg.HealthInterval, cfg.MaxMessageSize>>20, "MiB", cfg.DialTimeout)
	fmt.Println(cfg.Validate())
	cfg.Upstream = "postgres://127.0.0.1:5432?sslmode=disable"
	fmt.Println(cfg.Validate())
	cfg.RequireClientTLS = true
	fmt.Println(cfg.Validate())
	// Output:
	// 127.0.0.1:6432 1s 5s 64 MiB 10s
	// proxy: no upstream configured
	// <nil>
	// proxy: RequireClientTLS needs ClientTLS (a certificate and key)
}

// The gate refuses, at startup, a role that could switch enforcement off.
func Example_privilegedRole() {
	db, _, drop := exampleDB()
	defer drop()
	p, err := proxy.New(proxy.Config{Listen: "127.0.0.1:0", Upstream: "127.0.0.1:5432"})
	if err != nil {
		log.Fatal(err)
	}
	if err := p.Start(); err != nil {
		log.Fatal(err)
	}
	defer p.Close()
	_, err = pgx.Connect(context.Background(), "postgres://postgres@"+p.Addr()+"/"+db+"?sslmode=disable")
	fmt.Println("superuser:", code(err))
	// Output:
	// superuser: FG007
}

func code(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return fmt.Sprint(err)
}

// exampleDB creates a scratch database with the fencegate schema, a
// protected orders table and an application role on the PostgreSQL server
// at 127.0.0.1:5432 (as its superuser postgres), and returns the
// database's and the role's names and a function that drops them all.
func exampleDB() (db, app string, drop func()) {
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable")
	if err != nil {
		log.Fatal(err)
	}
	db = randomName("fg_example_")
	app, owner := randomName("fg_app_"), randomName("fg_owner_")
	for _, q := range []string{"CREATE DATABASE " + db, "CREATE ROLE " + app + " LOGIN", "CREATE ROLE " + owner + " NOLOGIN"} {
		if _, err := admin.Exec(ctx, q); err != nil {
			log.Fatal(err)
		}
	}
	cfg := admin.Config().Copy()
	cfg.Database = db
	c, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := pgfence.Install(ctx, c, pgfence.InstallOptions{OwnerRole: owner, Grant: []string{app}}); err != nil {
		log.Fatal(err)
	}
	if _, err := c.Exec(ctx, "CREATE TABLE orders (id int PRIMARY KEY, state text); INSERT INTO orders VALUES (42, 'new'); GRANT SELECT, UPDATE ON orders TO "+app); err != nil {
		log.Fatal(err)
	}
	if err := pgfence.Protect(ctx, c, "orders", "'order:' || id"); err != nil {
		log.Fatal(err)
	}
	c.Close(ctx)
	return db, app, func() {
		for _, q := range []string{"DROP DATABASE IF EXISTS " + db + " WITH (FORCE)", "DROP ROLE IF EXISTS " + app, "DROP ROLE IF EXISTS " + owner} {
			if _, err := admin.Exec(ctx, q); err != nil {
				log.Print(err)
			}
		}
		admin.Close(ctx)
	}
}

// randomName returns prefix followed by 12 random hex characters.
func randomName(prefix string) string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}
