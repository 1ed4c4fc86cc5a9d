package thirdparty

import "net/http"

// HTTPClient returns the destination's HTTP client: its TLS settings, its
// connections and its refusal of redirects, for a read of the destination
// made beside the pushes (syncer verify's lookups in a daemon). It carries
// no credentials: the caller sets its own header.
func (c *Client) HTTPClient() *http.Client { return c.httpClient }
