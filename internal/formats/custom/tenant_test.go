package custom_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/formats/custom"
	"github.com/syncer-dev/syncer/internal/thirdparty"
)

func TestForTenant(t *testing.T) {
	t.Parallel()
	f, err := custom.New(&custom.Config{
		Request:  custom.Request{Path: "/portals/{tenant}/{source}/batch", Body: `{portal: $tenant.portal_id, account: $tenant.id, ids: [.items[].id]}`},
		Deletes:  &custom.Request{Method: "DELETE", Path: "/portals/{tenant}/objects/{id}", PerItem: true},
		Accepted: `.body.portal == $tenant.portal_id or .status == 204`,
	})
	require.NoError(t, err)
	bound := f.ForTenant("acme/eu {x}", map[string]any{"portal_id": json.Number("4711"), "id": "not the tenant"})
	reqs, err := bound.Requests(batch())
	require.NoError(t, err)
	require.Len(t, reqs, 2)
	require.Equal(t, "/portals/acme%2Feu%20%7Bx%7D/orders/batch", reqs[0].Path)
	require.JSONEq(t, `{"portal":4711,"account":"acme/eu {x}","ids":["a/b c?#%é"]}`, string(reqs[0].Body))
	require.Equal(t, "/portals/acme%2Feu%20%7Bx%7D/objects/7", reqs[1].Path)

	res, err := bound.Read(&reqs[0], &thirdparty.Answer{StatusCode: http.StatusOK, Body: []byte(`{"portal":4711}`)})
	require.NoError(t, err)
	require.Empty(t, res.Rejected)
	_, err = bound.Read(&reqs[0], &thirdparty.Answer{StatusCode: http.StatusOK, Body: []byte(`{"portal":1}`)})
	require.Error(t, err, "$tenant in a response program is the bound tenant's")

	// Unbound, $tenant is null and the original format is unchanged.
	reqs, err = f.Requests(batch())
	require.NoError(t, err)
	require.JSONEq(t, `{"portal":null,"account":null,"ids":["a/b c?#%é"]}`, string(reqs[0].Body))
}
