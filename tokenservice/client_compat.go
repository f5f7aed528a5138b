package tokenservice

import "github.com/fencegate/fencegate/tokenclient"

// The client of the token service lives in package tokenclient, which
// imports neither Raft nor bbolt. The names below keep existing callers of
// tokenservice building; the server uses the same types and errors, so each
// is defined once, in tokenclient.

// The client and its options.
type (
	// Deprecated: use tokenclient.Client.
	Client = tokenclient.Client
	// Deprecated: use tokenclient.ClientOption.
	ClientOption = tokenclient.ClientOption
	// Deprecated: use tokenclient.ClientCredential.
	ClientCredential = tokenclient.ClientCredential
)

var (
	// Deprecated: use tokenclient.NewClient.
	NewClient = tokenclient.NewClient
	// Deprecated: use tokenclient.WithHTTPClient.
	WithHTTPClient = tokenclient.WithHTTPClient
	// Deprecated: use tokenclient.WithAttemptTimeout.
	WithAttemptTimeout = tokenclient.WithAttemptTimeout
	// Deprecated: use tokenclient.WithMaxWait.
	WithMaxWait = tokenclient.WithMaxWait
	// Deprecated: use tokenclient.WithBackoff.
	WithBackoff = tokenclient.WithBackoff
	// Deprecated: use tokenclient.WithFollowLeader.
	WithFollowLeader = tokenclient.WithFollowLeader
	// Deprecated: use tokenclient.WithCoalescing.
	WithCoalescing = tokenclient.WithCoalescing
	// Deprecated: use tokenclient.WithTLS.
	WithTLS = tokenclient.WithTLS
	// Deprecated: use tokenclient.WithCredential.
	WithCredential = tokenclient.WithCredential
	// Deprecated: use tokenclient.WithLogger.
	WithLogger = tokenclient.WithLogger
	// Deprecated: use tokenclient.NewClientCredential.
	NewClientCredential = tokenclient.NewClientCredential
	// Deprecated: use tokenclient.LoadClientCredential.
	LoadClientCredential = tokenclient.LoadClientCredential
	// Deprecated: use tokenclient.LoadClientTLS.
	LoadClientTLS = tokenclient.LoadClientTLS
	// ClientTLSConfig is also what a node uses to reach the others.
	ClientTLSConfig = tokenclient.ClientTLSConfig
	// NormalizeURL is also how a node reads --peers and --join addresses.
	NormalizeURL = tokenclient.NormalizeURL
)

// What the service answers and the client decodes; shared by server and
// client.
type (
	Token           = tokenclient.Token
	Member          = tokenclient.Member
	Members         = tokenclient.Members
	Snapshot        = tokenclient.Snapshot
	Restored        = tokenclient.Restored
	Status          = tokenclient.Status
	ReadIndexStatus = tokenclient.ReadIndexStatus
	ReservedRange   = tokenclient.ReservedRange
	APIError        = tokenclient.APIError
	// Role is what an identity may do. A route needs one of a set of roles
	// (see Routes); an identity holds one or more.
	Role = tokenclient.Role
)

// SnapshotFormat names the format of a Snapshot.
const SnapshotFormat = tokenclient.SnapshotFormat

// The roles; see tokenclient.RolePeer and the others.
const (
	RolePeer   = tokenclient.RolePeer
	RoleClient = tokenclient.RoleClient
	RoleAdmin  = tokenclient.RoleAdmin
)

// Roles lists every role.
var Roles = tokenclient.Roles

// maxResource caps resource names.
const maxResource = tokenclient.MaxResource

// validateResource checks a resource name; the client checks the same.
var validateResource = tokenclient.ValidateResource

// Error codes carried in the "code" field of an error response; see
// tokenclient.CodeBadRequest and the others.
const (
	CodeBadRequest      = tokenclient.CodeBadRequest
	CodeNotLeader       = tokenclient.CodeNotLeader
	CodeNoQuorum        = tokenclient.CodeNoQuorum
	CodeUnavailable     = tokenclient.CodeUnavailable
	CodeRefused         = tokenclient.CodeRefused
	CodeInternal        = tokenclient.CodeInternal
	CodeUnauthenticated = tokenclient.CodeUnauthenticated
	CodeForbidden       = tokenclient.CodeForbidden
)

// The errors the service answers with; see tokenclient.ErrBadRequest and
// the others. errors.Is matches them whichever package a caller names.
var (
	ErrBadRequest      = tokenclient.ErrBadRequest
	ErrEmptyResource   = tokenclient.ErrEmptyResource
	ErrNotLeader       = tokenclient.ErrNotLeader
	ErrNoQuorum        = tokenclient.ErrNoQuorum
	ErrUnavailable     = tokenclient.ErrUnavailable
	ErrNotRunning      = tokenclient.ErrNotRunning
	ErrRefused         = tokenclient.ErrRefused
	ErrInternal        = tokenclient.ErrInternal
	ErrNoServers       = tokenclient.ErrNoServers
	ErrUnauthenticated = tokenclient.ErrUnauthenticated
	ErrForbidden       = tokenclient.ErrForbidden
	ErrBadTLS          = tokenclient.ErrBadTLS
	ErrBadCredentials  = tokenclient.ErrBadCredentials
)
