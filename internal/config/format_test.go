package config_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/config"
	"github.com/syncer-dev/syncer/internal/formats/custom"
	"github.com/syncer-dev/syncer/internal/formats/standardwebhooks"
)

// contractFormats is docs/protocol.md section  7's example, with a source.
const contractFormats = `
destinations:
  hooks:
    url: https://hooks.example.com/syncer
    format: standard-webhooks
    signing_secret_env: HOOKS_SECRET     # whsec_ followed by base64
    max_in_flight: 16
  search:
    url: https://search.example.com:9200/orders   # the index
    format: elasticsearch
    headers:
      Authorization: {env: SEARCH_AUTH}  # any header: a literal, or {env: VAR}
  crm:
    url: https://api.crm.example.com
    format: custom
    token_env: CRM_TOKEN
    headers: {X-Tenant: acme}
    request:
      method: POST                       # default POST
      path: /crm/v3/objects/contacts/batch/upsert   # appended to url
      body: '{inputs: [.items[] | {id, properties: .payload}]}'
    deletes:                             # optional: tombstones in requests of their own
      path: /crm/v3/objects/contacts/batch/archive
      body: '{inputs: [.items[] | {id}]}'
    response:
      accepted: '.status == 204 or .body.status == "COMPLETE"'
      rejected: '[.body.errors[]? | {id: .context.ids[0], error: .message}]'
sources:
  - table: orders
    key: id
    destination: crm
`

var formatEnv = map[string]string{"HOOKS_SECRET": "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "SEARCH_AUTH": "Basic c2VjcmV0", "CRM_TOKEN": "t"}

func TestParseFormats(t *testing.T) {
	t.Parallel()
	cfg, err := config.Parse([]byte(contractFormats), env(formatEnv))
	require.NoError(t, err)
	hooks := cfg.Destination("hooks")
	require.Equal(t, "standard-webhooks", hooks.Format.Name)
	sw, ok := hooks.Format.Settings.(standardwebhooks.Settings)
	require.True(t, ok, "the format's own settings: %T", hooks.Format.Settings)
	require.Equal(t, formatEnv["HOOKS_SECRET"], sw.SigningSecret.Value)
	require.NotContains(t, fmt.Sprintf("%v %+v %#v", hooks, hooks, hooks), formatEnv["HOOKS_SECRET"], "a secret never prints itself")
	search := cfg.Destination("search")
	require.Equal(t, "Basic c2VjcmV0", search.Format.Header().Get("Authorization"))
	crm := cfg.Destination("crm")
	require.Equal(t, "acme", crm.Format.Header().Get("X-Tenant"))
	cc, ok := crm.Format.Settings.(custom.Config)
	require.True(t, ok, "the format's own settings: %T", crm.Format.Settings)
	require.Equal(t, "/crm/v3/objects/contacts/batch/archive", cc.Deletes.Path)
	require.Contains(t, cc.Rejected, ".body.errors")
}

func TestParseFormatRefusals(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name, from, to, env, want string
	}{
		{"unknown format", "format: elasticsearch", "format: kafka", "", `destinations.search.format: unknown format "kafka"`},
		{"secret of the wrong form", "", "", "not-a-secret", "destinations.hooks.signing_secret_env: standardwebhooks: the signing secret must be whsec_"},
		{"program that does not compile", "[.body.errors[]?", "[.body.errors[]? |", "", "destinations.crm.response.rejected:"},
		{"body that does not compile", "{inputs: [.items[] | {id}]}", "{inputs: [", "", "destinations.crm.deletes.body:"},
		{"field of another format", "format: elasticsearch", "format: elasticsearch\n    event_source: x", "", "destinations.search.event_source: is only for format cloudevents"},
		{"header from an unset variable", "SEARCH_AUTH}", "NOPE_AUTH}", "", "destinations.search.headers.Authorization.env: environment variable NOPE_AUTH is not set or empty"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := map[string]string{}
			for k, v := range formatEnv {
				e[k] = v
			}
			if tt.env != "" {
				e["HOOKS_SECRET"] = tt.env
			}
			doc := contractFormats
			if tt.from != "" {
				doc = strings.Replace(doc, tt.from, tt.to, 1)
			}
			_, err := config.Parse([]byte(doc), env(e))
			require.Error(t, err)
			require.Contains(t, err.Error(), tt.want)
			require.NotContains(t, err.Error(), "not-a-secret", "a secret is never quoted")
			require.NotContains(t, err.Error(), "\n")
		})
	}
}

// Issue 45: {source} in a custom path is accepted as any path is.
func TestParseCustomPathSource(t *testing.T) {
	t.Parallel()
	cfg, err := config.Parse([]byte(`destinations:
  crm:
    url: https://api.example.com/crm/v3/objects
    format: custom
    request:
      path: /{source}/batch/upsert
      body: '{inputs: [.items[] | {id, properties: .payload}]}'
sources:
  - {table: contacts, key: id, destination: crm}
  - {table: companies, key: id, destination: crm}
`), nil)
	require.NoError(t, err)
	cc := cfg.Destination("crm").Format.Settings.(custom.Config)
	require.Equal(t, "/{source}/batch/upsert", cc.Request.Path)
}
