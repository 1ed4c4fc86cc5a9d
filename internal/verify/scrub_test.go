package verify

import (
	"encoding/base64"
	"encoding/json"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/credentials"
	"github.com/syncer-dev/syncer/internal/formats/syncer"
	"github.com/syncer-dev/syncer/internal/lab/fakethirdparty"
	"github.com/syncer-dev/syncer/internal/thirdparty"
)

// Issue 54 point 7: a third party whose records show the Authorization
// they were sent with (the fake, with EchoAuthorization) gives back a
// payload holding the tenant's Basic header; the example's "there" side
// has it scrubbed, and stays JSON.
func TestExampleThereScrubbed(t *testing.T) {
	t.Parallel()
	fake := httptest.NewServer(fakethirdparty.New(fakethirdparty.Config{EchoAuthorization: true, Lookup: true}))
	t.Cleanup(fake.Close)
	const user, password = "ba-user", "pa/ss+word=&"
	c, err := thirdparty.New(&thirdparty.Config{URL: fake.URL, Auth: &credentials.Basic{
		Username: credentials.Literal("username", user), Password: credentials.Literal("password", password)}})
	require.NoError(t, err)
	t.Cleanup(c.Close)
	_, err = c.Push(t.Context(), "k1", []thirdparty.Item{{ID: "1", Version: 1, Payload: json.RawMessage(`{"name":"a"}`)}})
	require.NoError(t, err)

	rd := syncer.NewReader(c)
	there, err := rd.Lookup(t.Context(), []string{"1"})
	require.NoError(t, err)
	basic := base64.StdEncoding.EncodeToString([]byte(user + ":" + password))
	require.Contains(t, string(there["1"].Payload), basic, "the fake echoes the header")

	got := scrubbed(rd, thereSide(there["1"], true))
	require.JSONEq(t, `{"name":"a","seen_authorization":"Basic [redacted]"}`, string(got))
	require.Equal(t, null, scrubbed(rd, null))
}
