package daemon

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/config"
	"github.com/syncer-dev/syncer/internal/formats/custom"
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
		Custom: custom.Config{Request: custom.Request{Path: "/v1/{id}", Body: ".items"}}}}
	same := *base
	same.Token = "another secret"
	same.Format.SigningSecret = "whsec_another"
	require.Equal(t, tag(base), tag(&same), "a secret is not in the tag")
	for _, change := range []func(c *config.Destination){
		func(c *config.Destination) { c.URL = "https://other.example.com" },
		func(c *config.Destination) { c.Format.Name = "cloudevents" },
		func(c *config.Destination) { c.Format.Custom.Request.Body = ".items[0]" },
	} {
		c := *base
		change(&c)
		require.NotEqual(t, tag(base), tag(&c))
	}
	require.NotEmpty(t, d.bodyTag(&destination{}), "the default destination has a tag")
	off := &Daemon{cfg: Config{SendUnchanged: true}}
	require.Empty(t, off.bodyTag(&destination{conf: base}), "SendUnchanged: no tag, nothing skipped")
}
