package e2e

import (
	"encoding/base64"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/daemon"
	"github.com/syncer-dev/syncer/internal/formats"
	"github.com/syncer-dev/syncer/internal/formats/standardwebhooks"
	"github.com/syncer-dev/syncer/internal/lab/fakethirdparty"
)

// Issue 46: the destination the SYNCER_THIRDPARTY_* settings configure is
// built as a file's destination is, so its signing secret file is read
// again when it changes, as a destination's signing_secret_file is
// (before, it was read once at start): the receiver's new secret written
// to the file, the held rows go without a restart.
func TestFlagSigningSecretFileIsReadAgain(t *testing.T) {
	t.Parallel()
	b := setup(t, fakethirdparty.Config{})
	newSecret := "whsec_" + base64.StdEncoding.EncodeToString([]byte("the receiver's new secret"))
	hooks := newDestination(t, fakethirdparty.Config{Format: standardwebhooks.Name, SigningSecret: newSecret, SignatureStatus: http.StatusBadRequest})
	path := secretFile(t, t.TempDir(), "signing", webhookSecret)
	b.startDaemon(t, func(c *daemon.Config) {
		c.ThirdParty.URL = hooks.url
		c.Format = formats.Spec{Name: standardwebhooks.Name, Settings: standardwebhooks.Settings{
			SigningSecret: formats.Secret{Field: "signing_secret", File: path, Value: webhookSecret}}}
		c.Delivery.AuthProbeInterval = time.Second
	})
	b.exec(t, `INSERT INTO resources (id, payload) SELECT g, jsonb_build_object('n', g) FROM generate_series(1, 10) g`)
	waitFor(t, 60*time.Second, "requests refused for their signature", func() bool {
		return hooks.fake.Stats().RequestsByStatus["400"] >= 2
	})
	require.Empty(t, hooks.fake.Deliveries())
	require.NoError(t, os.WriteFile(path, []byte(newSecret+"\n"), 0o600))
	b.waitAllSynced(t, time.Minute)
	require.Len(t, byID(hooks.fake), 10, "every row delivered, signed with the file's new secret")
}
