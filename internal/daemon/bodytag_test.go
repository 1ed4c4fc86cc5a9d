package daemon

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/config"
	"github.com/syncer-dev/syncer/internal/formats/custom"
	"github.com/syncer-dev/syncer/internal/formats/setting"
	"github.com/syncer-dev/syncer/internal/formats/standardwebhooks"
)

// Issue 45: a destination's body tag (the digests of accepted bodies are
// kept under it) is set for every format, custom programs included, and
// changes with the URL, the format and its programs, never with a secret.
func TestBodyTagFollowsWhatRendersTheBody(t *testing.T) {
	t.Parallel()
	d := &Daemon{}
	d.cfg.ThirdParty.URL = "http://127.0.0.1:1"
	tag := func(c *config.Destination) string {
		t.Helper()
		s := d.bodyTag(&destination{conf: c})
		require.NotEmpty(t, s)
		return s
	}
	base := &config.Destination{URL: "https://api.example.com", Format: config.Format{Name: "custom",
		Settings: custom.Config{Request: custom.Request{Path: "/v1/{id}", Body: ".items"}}}}
	same := *base
	same.Token = "another secret"
	same.Format.Headers = map[string]config.Secret{"X-Api-Key": "another"}
	require.Equal(t, tag(base), tag(&same), "a secret is not in the tag")
	signed := func(secret string) *config.Destination {
		return &config.Destination{URL: "https://api.example.com", Format: config.Format{Name: standardwebhooks.Name,
			Settings: standardwebhooks.Settings{SigningSecret: setting.Secret{Field: "signing_secret", Env: "S", Value: secret}}}}
	}
	require.Equal(t, tag(signed("whsec_one")), tag(signed("whsec_two")), "a signing secret is not in the tag")
	for _, change := range []func(c *config.Destination){
		func(c *config.Destination) { c.URL = "https://other.example.com" },
		func(c *config.Destination) { c.Format.Name = "cloudevents" },
		func(c *config.Destination) {
			c.Format.Settings = custom.Config{Request: custom.Request{Path: "/v1/{id}", Body: ".items[0]"}}
		},
	} {
		c := *base
		change(&c)
		require.NotEqual(t, tag(base), tag(&c))
	}
	require.NotEmpty(t, d.bodyTag(&destination{}), "the default destination has a tag")
	off := &Daemon{cfg: Config{SendUnchanged: true}}
	require.Empty(t, off.bodyTag(&destination{conf: base}), "SendUnchanged: no tag, nothing skipped")
}
