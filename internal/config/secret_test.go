package config_test

import (
	"bytes"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/config"
)

func withTokenFile(path string) string {
	return fmt.Sprintf(`destinations:
  crm:
    url: https://api.example.com
    token_file: %s
sources:
  - table: orders
    key: id
    destination: crm
`, path)
}

func TestTokenFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(content), 0o600))
		return p
	}

	t.Run("read once, one trailing newline ignored", func(t *testing.T) {
		t.Parallel()
		p := write("token", "s3cr3t-file-token\n")
		cfg, err := config.Parse([]byte(withTokenFile(p)), env(nil))
		require.NoError(t, err)
		d := cfg.Destination("crm")
		require.Equal(t, "s3cr3t-file-token", d.Token.Reveal())
		require.Equal(t, p, d.TokenFile)
		require.Empty(t, d.TokenEnv)

		// Read at load, not at use: the file may go once loaded.
		require.NoError(t, os.WriteFile(p, []byte("changed"), 0o600))
		require.Equal(t, "s3cr3t-file-token", d.Token.Reveal())

		var logs bytes.Buffer
		slog.New(slog.NewJSONHandler(&logs, nil)).Info("x", slog.Any("destination", d))
		for _, s := range []string{logs.String(), fmt.Sprintf("%v %+v %#v", *d, *d, *d)} {
			require.NotContains(t, s, "s3cr3t")
		}
		require.Contains(t, logs.String(), p, "the file's path is logged, its content never")
	})
	t.Run("only one newline and a CR before it", func(t *testing.T) {
		t.Parallel()
		p := write("crlf", "tok\r\n\n")
		cfg, err := config.Parse([]byte(withTokenFile(p)), env(nil))
		require.NoError(t, err)
		require.Equal(t, "tok\r\n", cfg.Destination("crm").Token.Reveal(), "one newline is the file's end; the rest is the secret's")
		p = write("crlf1", "tok\r\n")
		cfg, err = config.Parse([]byte(withTokenFile(p)), env(nil))
		require.NoError(t, err)
		require.Equal(t, "tok", cfg.Destination("crm").Token.Reveal())
	})
	t.Run("migrate reads no file", func(t *testing.T) {
		t.Parallel()
		cfg, err := config.Parse([]byte(withTokenFile(filepath.Join(dir, "absent"))), nil)
		require.NoError(t, err)
		require.Empty(t, cfg.Destination("crm").Token.Reveal())
	})

	refusals := []struct {
		name string
		file string
		want string
	}{
		{"missing", withTokenFile(filepath.Join(dir, "absent")), "destinations.crm.token_file: cannot read " + filepath.Join(dir, "absent") + ": no such file (line 4)"},
		{"empty", withTokenFile(write("empty", "\n")), "destinations.crm.token_file: " + filepath.Join(dir, "empty") + " is empty (line 4)"},
		{"a directory", withTokenFile(dir), "destinations.crm.token_file: cannot read " + dir + ": is a directory (line 4)"},
		{"both", `destinations:
  crm:
    url: https://api.example.com
    token_env: CRM_TOKEN
    token_file: /run/secrets/crm
sources:
  - table: orders
    key: id
    destination: crm
`, "destinations.crm.token_file: token_env and token_file are exclusive: give one (line 5)"},
		{"not a string", withTokenFile("[a, b]"), "destinations.crm.token_file: must be a string (line 4)"},
	}
	for _, tt := range refusals {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := config.Parse([]byte(tt.file), env(map[string]string{"CRM_TOKEN": "t"}))
			require.Error(t, err)
			require.True(t, config.IsConfigError(err))
			require.Equal(t, tt.want, err.Error())
		})
	}
}

func TestReadSecretFileNeverQuotesTheSecret(t *testing.T) {
	t.Parallel()
	p := filepath.Join(t.TempDir(), "s")
	require.NoError(t, os.WriteFile(p, []byte("hunter2\n"), 0o600))
	v, msg := config.ReadSecretFile(p)
	require.Equal(t, "hunter2", v)
	require.Empty(t, msg)
}
