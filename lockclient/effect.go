package lockclient

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/fencegate/fencegate"
	"github.com/jackc/pgx/v5"
)

// Effect records, in tx, a call to another system that a relay makes once
// tx commits: payload is POSTed to the relay's target named target, with
// this lock's resource and token in the Fencing-Resource and Fencing-Token
// headers and an Idempotency-Key that stays the same across the relay's
// retries (see package relay and "fencegate relay"). It returns the
// effect's id.
//
// tx must hold a standing fence on the lock's resource: call it inside
// InTx's fn (or after Fence on tx). Like a write to a protected table, the
// effect is refused without the fence (ErrUnfenced), and a stale holder
// never gets that far: InTx's fence already refused its token
// (ErrStaleToken). A rollback, or an InTx that fails, leaves no effect; an
// InTx that runs fn again records it again in the new transaction only.
//
// payload is sent as JSON: a json.RawMessage or []byte is taken as it is
// (it must be JSON), anything else is encoded with encoding/json.
func (l *Lock) Effect(ctx context.Context, tx pgx.Tx, target string, payload any) (int64, error) {
	var body []byte
	switch p := payload.(type) {
	case json.RawMessage:
		body = p
	case []byte:
		body = p
	default:
		b, err := json.Marshal(payload)
		if err != nil {
			return 0, fmt.Errorf("lockclient: effect for %q on %q: encode the payload: %w", target, l.resource, err)
		}
		body = b
	}
	if !json.Valid(body) {
		return 0, fmt.Errorf("lockclient: effect for %q on %q: the payload is not JSON", target, l.resource)
	}
	var id int64
	if err := tx.QueryRow(ctx, fencegate.EffectSQL, l.resource, target, string(body)).Scan(&id); err != nil {
		return 0, fmt.Errorf("lockclient: effect for %q on %q: %w", target, l.resource, fenceError(err))
	}
	return id, nil
}
