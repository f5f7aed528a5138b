// Package tokenapi is the HTTP/JSON API of the fencegate token service as
// both of its sides speak it: the JSON forms of its requests and answers
// and the headers it sets, the error codes it answers with and the errors
// they stand for (APIError and the sentinels errors.Is matches), the roles
// an identity may hold, and the rule a resource name follows. The server
// (package tokenservice), its Raft store (package raftstore) and the Go
// client (package tokenclient) all use these definitions, so each form is
// written once.
//
// It imports the standard library only, so a program that speaks the API
// (a client, a proxy, a test double) carries no server code.
//
// The routes and what each answers are described in package tokenservice.
package tokenapi
