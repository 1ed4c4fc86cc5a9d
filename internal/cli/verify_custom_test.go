package cli_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/lab/fakethirdparty"
)

// webhooksSecret is the signing secret of the standard-webhooks tests.
const webhooksSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// TestVerifyCustomBlock: a standard-webhooks destination, which has no
// read API, is read through its verify block: the request program asks
// the receiver's lookup, the response program says what it holds, and the
// compare program decides (here: only status counts, so an edit to
// another field is no drift); a cloudevents destination is read through
// the same block. Without one, verify exits 2 saying the format has no
// read API (standard-webhooks, cloudevents, custom).
func TestVerifyCustomBlock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	fake := fakethirdparty.New(fakethirdparty.Config{Format: fakethirdparty.FormatStandardWebhooks, SigningSecret: webhooksSecret, Lookup: true})
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	dir := t.TempDir()
	secret := secretFile(t, dir, "whsec", webhooksSecret)
	cv := newConfiguredVerify(t, ctx, srv.URL, `    format: standard-webhooks
    signing_secret_file: `+secret+`
    verify:
      request:
        path: /v1/lookup
        body: '{ids: [.items[] | .id]}'
      response: '[.body.items[] | {id, payload, deleted}]'
      compare: '.here.payload.status == .there.status'`, fake, 8, "error")

	fake.ApplyDrift(fakethirdparty.Drift{
		Lose: []string{"2"},
		Edit: map[string]json.RawMessage{
			"3": json.RawMessage(`{"id": 3, "status": "edited in the UI"}`),
			"4": json.RawMessage(`{"id": 4, "status": "new", "note": "added there"}`),
		},
		Unknown: []string{"5"},
	})
	r := cv.verify(ctx, "--json")
	require.Equal(t, 3, r.code, r.stdout+r.stderr)
	v := verifyJSON(t, r)
	require.Equal(t, [7]int64{8, 5, 1, 1, 0, 1, 0}, [7]int64{v.Checked, v.OK, v.Missing, v.Stale, v.Zombie, v.Unknown, v.Pending})
	for _, ex := range v.Examples {
		if ex.ID == "3" {
			require.Equal(t, "stale", ex.Kind)
			require.JSONEq(t, `{"id": 3, "status": "new"}`, string(ex.Here))
			require.JSONEq(t, `{"id": 3, "status": "edited in the UI"}`, string(ex.There))
		}
	}

	// The same destination as cloudevents, read through the same block;
	// then without the block, as each format without a read API: exit 2.
	cfg := cv.args[len(cv.args)-1]
	text, err := os.ReadFile(cfg)
	require.NoError(t, err)
	withFormat := func(format string, block bool) string {
		s := string(text)
		if format != "standard-webhooks" {
			s = strings.Replace(s, "format: standard-webhooks\n    signing_secret_file: "+secret+"\n", "format: "+format+"\n", 1)
		}
		if !block {
			s = s[:strings.Index(s, "    verify:")] + s[strings.Index(s, "sources:"):]
		}
		p := filepath.Join(dir, fmt.Sprintf("%s-%t.yaml", format, block))
		require.NoError(t, os.WriteFile(p, []byte(s), 0o600))
		return p
	}
	r = run(ctx, "verify", "--source", "orders", "--json", "--database-url", cv.b.dsn, "--config", withFormat("cloudevents", true))
	require.Equal(t, 3, r.code, r.stdout+r.stderr)
	ce := verifyJSON(t, r)
	require.Equal(t, [3]int64{v.Checked, v.Missing, v.Stale}, [3]int64{ce.Checked, ce.Missing, ce.Stale})
	for _, format := range []string{"standard-webhooks", "cloudevents", "custom"} {
		r = run(ctx, "verify", "--source", "orders", "--database-url", cv.b.dsn, "--config", withFormat(format, false))
		require.Equal(t, 2, r.code, r.stdout+r.stderr)
		oneLine(t, r, "destination crm: format "+format+" has no read API")
	}
}

// TestVerifyBlockRefused: a verify block that cannot work is refused by
// config check (exit 1), with a line naming the destination and the field.
func TestVerifyBlockRefused(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ block, want string }{
		{"    verify: {request: {path: /lookup}}", "destination crm: verify.response: required"},
		{"    verify: {response: '[.body.items[] | {id'}", "destination crm: verify.response: "},
		{"    verify: {request: {body: '{ids'}, response: '.body'}", "destination crm: verify.request.body: "},
		{"    verify: {response: '.body', compare: 'if'}", "destination crm: verify.compare: "},
		{"    verify: {request: {path: 'lookup'}, response: '.body'}", "destination crm: verify.request.path: must start with /"},
		{"    verify: {request: {path: '/items/{id}'}, response: '.body'}", "destination crm: verify.request.path: a lookup asks for many ids"},
		{"    verify: {response: '.body', lookup_size: 0}", "destination crm: verify.lookup_size: must be a whole number of ids, 1 or more"},
		{"    verify: {response: '.body', bogus: 1}", `destination crm: verify: unknown field "bogus"`},
	} {
		cfg := filepath.Join(t.TempDir(), "syncer.yaml")
		require.NoError(t, os.WriteFile(cfg, []byte("destinations:\n  crm:\n    url: https://api.example.com\n    format: custom\n"+tt.block+`
sources:
  - table: orders
    key: id
    destination: crm
`), 0o600))
		r := run(t.Context(), "config", "check", "--database-url", "postgres://127.0.0.1:1/none", "--no-probe", "--config", cfg)
		require.Equal(t, 1, r.code, "%s: %s", tt.block, r.stdout+r.stderr)
		require.Contains(t, r.stdout, tt.want)
	}
}
