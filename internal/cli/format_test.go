package cli_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestRunFormatSettings: a format setting that cannot work exits 2 with
// one line naming the setting, and never quotes the secret.
func TestRunFormatSettings(t *testing.T) {
	t.Parallel()
	db := []string{"--database-url", "postgres://127.0.0.1:5432/test", "--thirdparty-url", "http://127.0.0.1:9"}
	dir := t.TempDir()
	secretFile := filepath.Join(dir, "secret")
	require.NoError(t, os.WriteFile(secretFile, []byte("not-whsec-secret\n"), 0o600))
	cfg := filepath.Join(dir, "syncer.yaml")
	require.NoError(t, os.WriteFile(cfg, []byte(`destinations:
  crm:
    url: http://127.0.0.1:9
    format: custom
    response:
      rejected: '[.body.errors[] |'
sources:
  - table: orders
    key: id
    destination: crm
`), 0o600))
	for _, tt := range []struct {
		name string
		args []string
		want string
	}{
		{"unknown format", []string{"--thirdparty-format", "kafka"}, `--thirdparty-format (SYNCER_THIRDPARTY_FORMAT) must be one of syncer, standard-webhooks, cloudevents, elasticsearch (custom needs a file: SYNCER_CONFIG), got "kafka"`},
		{"webhooks without a secret", []string{"--thirdparty-format", "standard-webhooks"}, "--thirdparty-signing-secret (SYNCER_THIRDPARTY_SIGNING_SECRET): required by standard-webhooks"},
		{"secret of the wrong form", []string{"--thirdparty-format", "standard-webhooks", "--thirdparty-signing-secret", "not-whsec-secret"},
			"--thirdparty-signing-secret (SYNCER_THIRDPARTY_SIGNING_SECRET): standardwebhooks: the signing secret must be whsec_ followed by base64"},
		{"secret file of the wrong form", []string{"--thirdparty-format", "standard-webhooks", "--thirdparty-signing-secret-file", secretFile},
			"--thirdparty-signing-secret-file (SYNCER_THIRDPARTY_SIGNING_SECRET_FILE): standardwebhooks: the signing secret must be"},
		{"program that does not compile", []string{"--config", cfg}, "destinations.crm.response.rejected:"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := run(t.Context(), append(append([]string{"run"}, db...), tt.args...)...)
			require.Equal(t, 2, r.code, r.stderr)
			oneLine(t, r, tt.want)
			require.NotContains(t, r.stderr, "not-whsec-secret")
		})
	}
}
