package labcli

import (
	"bytes"
	"testing"
	"time"

	"github.com/alecthomas/kong"
	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/lab/fakethirdparty"
)

func TestFakeThirdpartyFlagsValidated(t *testing.T) {
	t.Parallel()
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"--redirect", "305"}, "--redirect"},
		{[]string{"--redirect", "200"}, "--redirect"},
		{[]string{"--bad-answer", "teapot"}, "--bad-answer"},
		{[]string{"--unannounced-limit", "-1"}, "--unannounced-limit"},
		{[]string{"--quota", "-2"}, "--quota"},
		{[]string{"--quota", "5", "--quota-window", "0s"}, "--quota-window"},
	}
	for _, tt := range tests {
		t.Run(tt.want+" "+tt.args[len(tt.args)-1], func(t *testing.T) {
			t.Parallel()
			var out, errb bytes.Buffer
			code := Main(t.Context(), append([]string{"fake-thirdparty"}, tt.args...), &out, &errb)
			require.Equal(t, 2, code, errb.String())
			require.Contains(t, errb.String(), tt.want)
		})
	}
}

func TestFakeThirdpartyFlagsReachTheFake(t *testing.T) {
	t.Parallel()
	var root Lab
	parser, err := kong.New(&root, program().Vars)
	require.NoError(t, err)
	_, err = parser.Parse([]string{"fake-thirdparty", "--redirect", "307", "--redirect-location", "https://x.example/",
		"--bad-answer", "unknown-id", "--retry-after-raw", "999999999", "--unannounced-limit", "5",
		"--quota", "10", "--quota-window", "2s", "--quota-x-headers"})
	require.NoError(t, err)
	cfg := root.FakeThirdparty.config()
	require.Equal(t, 307, cfg.Redirect)
	require.Equal(t, "https://x.example/", cfg.RedirectLocation)
	require.Equal(t, fakethirdparty.BadAnswerUnknownID, cfg.BadAnswer)
	require.Equal(t, "999999999", cfg.RetryAfterRaw)
	require.Equal(t, 5.0, cfg.UnannouncedLimit)
	require.Equal(t, 10, cfg.Quota)
	require.Equal(t, 2*time.Second, cfg.QuotaWindow)
	require.True(t, cfg.QuotaXHeaders)
}
