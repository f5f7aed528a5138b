package faults

import (
	"fmt"

	"github.com/anishathalye/porcupine"
)

// TEMPORARY until the shared token model lands: replace with it.
func tokenModel() porcupine.Model {
	return porcupine.Model{
		Init: func() any { return int64(0) },
		Step: func(state, input, output any) (bool, any) {
			t := output.(int64)
			return t > state.(int64), t
		},
		DescribeOperation: func(input, output any) string { return fmt.Sprintf("next(%v) -> %v", input, output) },
	}
}

func tokenOperation(client int, resource string, call, ret, token int64) porcupine.Operation {
	return porcupine.Operation{ClientId: client, Input: resource, Call: call, Output: token, Return: ret}
}
