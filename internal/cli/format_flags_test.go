package cli

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/formats"
	"github.com/syncer-dev/syncer/internal/formats/standardwebhooks"
)

// Issue 46: the SYNCER_THIRDPARTY_* settings are read by the format's own
// parsing, into the format's own settings, with the secret's file kept so
// that the daemon reads it again when it changes, as a file destination's.
func TestFlagFormatIsTheFormatsOwnSettings(t *testing.T) {
	t.Parallel()
	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	path := filepath.Join(t.TempDir(), "secret")
	require.NoError(t, os.WriteFile(path, []byte(secret+"\n"), 0o600))
	c := &RunCmd{ThirdpartyFormat: standardwebhooks.Name, ThirdpartySigningSecretFile: path}
	require.NoError(t, c.validateFormat())
	require.Equal(t, formats.Spec{Name: standardwebhooks.Name, Settings: standardwebhooks.Settings{
		SigningSecret: formats.Secret{Field: "signing_secret", File: path, Value: secret}}}, c.format)

	c = &RunCmd{ThirdpartyFormat: standardwebhooks.Name, ThirdpartySigningSecret: secret}
	require.NoError(t, c.validateFormat())
	require.Equal(t, formats.Secret{Field: "signing_secret", Env: "SYNCER_THIRDPARTY_SIGNING_SECRET", Value: secret},
		c.format.Settings.(standardwebhooks.Settings).SigningSecret)
}
