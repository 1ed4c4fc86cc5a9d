package custom_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/formats/custom"
	"github.com/syncer-dev/syncer/internal/thirdparty"
)

// TestVerifyRequest: the request program sees the source, the ids and the
// items as they would be sent (no version when it is not known), a path's
// {ids} are escaped and joined, and GET sends no body by default.
func TestVerifyRequest(t *testing.T) {
	t.Parallel()
	v, err := custom.NewVerify(&custom.VerifyConfig{
		Request:  custom.Request{Path: "/{source}/read", Body: `{source, ids, items}`},
		Response: `[]`,
	})
	require.NoError(t, err)
	items := []thirdparty.Item{
		{ID: "a/b", Version: 3, Payload: json.RawMessage(`{"n":12345678901234567890}`)},
		{ID: "7", Deleted: true},
	}
	r, err := v.Request("orders", items)
	require.NoError(t, err)
	require.Equal(t, "POST", r.Method)
	require.Equal(t, "/orders/read", r.Path)
	require.Equal(t, []string{"a/b", "7"}, r.IDs)
	require.Equal(t, `{"ids":["a/b","7"],"items":[{"id":"a/b","payload":{"n":12345678901234567890},"version":3},{"deleted":true,"id":"7"}],"source":"orders"}`, string(r.Body))

	get, err := custom.NewVerify(&custom.VerifyConfig{Request: custom.Request{Method: "get", Path: "/objects?ids={ids}"}, Response: `[]`})
	require.NoError(t, err)
	r, err = get.Request("orders", items)
	require.NoError(t, err)
	require.Equal(t, "GET", r.Method)
	require.Equal(t, "/objects?ids=a%2Fb,7", r.Path)
	require.Empty(t, r.Body)
}

// TestVerifyForTenant: a block bound to a tenant's account reads it as
// the tenant's deliverer sends to it: {tenant} in the path is the tenant
// (escaped), $tenant its value and its connection row's extra columns;
// the block itself stays unbound ($tenant null).
func TestVerifyForTenant(t *testing.T) {
	t.Parallel()
	v, err := custom.NewVerify(&custom.VerifyConfig{
		Request:  custom.Request{Path: "/portals/{tenant}/read", Body: `{portal: $tenant.portal_id, tenant: $tenant.id, ids}`},
		Response: `[]`,
	})
	require.NoError(t, err)
	items := []thirdparty.Item{{ID: "1", Payload: json.RawMessage(`{}`)}}
	r, err := v.ForTenant("in/itech", map[string]any{"portal_id": "p-9"}).Request("contacts", items)
	require.NoError(t, err)
	require.Equal(t, "/portals/in%2Fitech/read", r.Path)
	require.JSONEq(t, `{"portal":"p-9","tenant":"in/itech","ids":["1"]}`, string(r.Body))

	r, err = v.Request("contacts", items)
	require.NoError(t, err)
	require.Equal(t, "/portals/{tenant}/read", r.Path, "unbound: the placeholder stays")
	require.JSONEq(t, `{"portal":null,"tenant":null,"ids":["1"]}`, string(r.Body))
}

// TestVerifyAnswer: the response program's entries become what is held:
// a payload, deleted, or unknown for a null payload; numeric ids read as
// their digits; anything that is not an answer is an error naming the
// field, and so is an id that was not asked for.
func TestVerifyAnswer(t *testing.T) {
	t.Parallel()
	v, err := custom.NewVerify(&custom.VerifyConfig{Response: `[.body.docs[] | {id, payload: .doc, deleted}]`})
	require.NoError(t, err)
	body := []byte(`{"docs": [{"id": 42, "doc": {"n": 1}}, {"id": "b", "deleted": true}, {"id": "c", "doc": null}]}`)
	held, err := v.Answer(http.StatusOK, nil, body, []string{"42", "b", "c", "d"})
	require.NoError(t, err)
	require.Equal(t, map[string]custom.Held{
		"42": {Payload: json.RawMessage(`{"n":1}`)},
		"b":  {Deleted: true},
		"c":  {Unknown: true},
	}, held)

	_, err = v.Answer(http.StatusOK, nil, body, []string{"b", "c"})
	require.ErrorContains(t, err, "verify.response: entry 0 names an id that was not asked for")
	_, err = v.Answer(http.StatusOK, nil, []byte(`{"docs": 3}`), []string{"b"})
	require.ErrorContains(t, err, "verify.response: ")

	bad, err := custom.NewVerify(&custom.VerifyConfig{Response: `.body`})
	require.NoError(t, err)
	_, err = bad.Answer(http.StatusOK, nil, []byte(`{"a": 1}`), []string{"a"})
	require.ErrorContains(t, err, "verify.response: gives an object, not a list")
}

// TestVerifyCompare: the compare program takes the item as it would be
// sent and the payload held, and must give a boolean.
func TestVerifyCompare(t *testing.T) {
	t.Parallel()
	v, err := custom.NewVerify(&custom.VerifyConfig{Response: `[]`, Compare: `.here.payload.email == .there.properties.email`})
	require.NoError(t, err)
	here := &thirdparty.Item{ID: "1", Payload: json.RawMessage(`{"email": "ann@example.com"}`)}
	ok, err := v.Agree(here, json.RawMessage(`{"properties": {"email": "ann@example.com", "hs_object_id": "9"}}`))
	require.NoError(t, err)
	require.True(t, ok)
	ok, err = v.Agree(here, json.RawMessage(`{"properties": {"email": "bob@example.com"}}`))
	require.NoError(t, err)
	require.False(t, ok)

	notBool, err := custom.NewVerify(&custom.VerifyConfig{Response: `[]`, Compare: `.there`})
	require.NoError(t, err)
	_, err = notBool.Agree(here, json.RawMessage(`{"a": 1}`))
	require.ErrorContains(t, err, "verify.compare: gives an object, not a boolean")
}
