package thirdparty_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/thirdparty"
)

// TestSendHeadersAndScrubbedEcho: configured headers go with every
// request; a header value echoed back never leaves in an error.
func TestSendHeadersAndScrubbedEcho(t *testing.T) {
	t.Parallel()
	const apiKey = "ApiKey c2VjcmV0LWtleS12YWx1ZQ=="
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "bad key "+r.Header.Get("Authorization")+" for tenant "+r.Header.Get("X-Tenant")+" at "+r.Method+" "+r.URL.RequestURI(), http.StatusTeapot)
	}))
	t.Cleanup(srv.Close)
	c, err := thirdparty.New(&thirdparty.Config{URL: srv.URL + "/base?v=2", Headers: http.Header{"Authorization": {apiKey}, "X-Tenant": {"acme"}}})
	require.NoError(t, err)
	_, err = c.Send(context.Background(), "k", &thirdparty.Request{Method: http.MethodPut, Path: "/objects/a%2Fb", Body: []byte(`{}`)}, nil)
	require.Error(t, err)
	require.NotContains(t, err.Error(), "c2VjcmV0LWtleS12YWx1ZQ")
	require.Contains(t, err.Error(), "tenant acme at PUT /base/objects/a%2Fb?v=2")
}
