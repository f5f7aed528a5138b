// Package testutil holds helpers shared by fencegate's tests: polling waits,
// free loopback ports, throwaway PostgreSQL databases and Redis servers, test
// loggers and a once-per-package build of the fencegate binary.
//
// Tests that need PostgreSQL or Redis fail (never skip) when the service is
// not reachable: a missing service is a broken environment, not a pass.
// Under -short (see NeedServices) they skip instead: `go test -short ./...`
// runs only the tests that need no service and no network.
//
// Environment variables:
//
//	FENCEGATE_TEST_PG     admin DSN of the PostgreSQL used by tests
//	                      (default postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable)
//	FENCEGATE_TEST_REDIS  address of the shared Redis (default 127.0.0.1:6379)
package testutil
