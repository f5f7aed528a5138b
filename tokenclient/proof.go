package tokenclient

import "context"

// NextSigned returns a new token for resource and its proof ("" when the
// service does not sign). It is what lockclient uses to pass proofs by
// itself.
func (c *Client) NextSigned(ctx context.Context, resource string) (int64, string, error) {
	t, err := c.Next(ctx, resource)
	if err != nil {
		return 0, "", err
	}
	return t.Value, t.Proof, nil
}
