package tokenservice

import "github.com/fencegate/fencegate/internal/tokenwire"

// The wire forms of requests and answers, defined once in tokenwire.
type (
	tokenRequest   = tokenwire.TokenRequest
	batchResponse  = tokenwire.BatchResponse
	batchToken     = tokenwire.BatchToken
	tokenResponse  = tokenwire.TokenResponse
	allocRequest   = tokenwire.AllocRequest
	allocResponse  = tokenwire.AllocResponse
	memberRequest  = tokenwire.MemberRequest
	apiAddrRequest = tokenwire.ApiAddrRequest
	restoreRequest = tokenwire.RestoreRequest
	errorResponse  = tokenwire.ErrorResponse
)
