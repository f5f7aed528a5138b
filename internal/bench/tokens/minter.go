package main

// newFencegateMinter returns the client the fencegate side uses.
func newFencegateMinter(c *fencegateCluster, resource string, conc int) (minter, error) {
	return newHTTPMinter(c, resource, conc), nil
}
