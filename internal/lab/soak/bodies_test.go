package soak

import (
	"testing"

	"github.com/itchyny/gojq"
	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/config"
	"github.com/syncer-dev/syncer/internal/lab/fakethirdparty"
	"github.com/syncer-dev/syncer/internal/thirdparty"
)

// The checks read what each destination was sent in its own format.
func TestSentItems(t *testing.T) {
	t.Parallel()
	bulk := `{"index":{"_id":"acct-1","version":3,"version_type":"external"}}` + "\n" + `{"id":"acct-1","n":2}` + "\n" +
		`{"delete":{"_id":"acct-2","version":4,"version_type":"external"}}` + "\n"
	require.Equal(t, []thirdparty.Item{
		{ID: "acct-1", Version: 3, Payload: []byte(`{"id":"acct-1","n":2}`)},
		{ID: "acct-2", Version: 4, Deleted: true},
	}, sentItems(fakethirdparty.FormatElasticsearch, "/accounts/_bulk", []byte(bulk)))
	require.Equal(t, []thirdparty.Item{{ID: "7", Version: 2, Payload: []byte(`{"id":7}`)}},
		sentItems(fakethirdparty.FormatCustom, "/crm/v3/objects/orders/batch/upsert", []byte(`{"inputs":[{"id":"7","version":2,"properties":{"id":7}}]}`)))
	require.Equal(t, []thirdparty.Item{{ID: "7", Version: 3, Deleted: true}},
		sentItems(fakethirdparty.FormatCustom, "/crm/v3/objects/orders/batch/archive", []byte(`{"inputs":[{"id":"7","version":3}]}`)))
	require.Equal(t, []thirdparty.Item{{ID: "acct-3", Version: 5, Payload: []byte(`{"n":1}`)}},
		sentItems(fakethirdparty.FormatStandardWebhooks, "/hooks", []byte(`{"type":"accounts-hooks.upserted","timestamp":"2026-11-24T13:00:00Z","data":{"id":"acct-3","version":5,"payload":{"n":1}}}`)))
	require.Equal(t, []thirdparty.Item{{ID: "9", Version: 1, Payload: []byte(`{"a":1}`)}},
		sentItems("", "/v1/batches", []byte(`{"items":[{"id":"9","version":1,"payload":{"a":1}}]}`)))
}

// The configuration file is valid in every state the faults put it in,
// and hub's response program accepts an answer with or without the load.
func TestConfigYAML(t *testing.T) {
	t.Parallel()
	for _, st := range []configState{{crmInFlight: 4}, {crmInFlight: 3, hubBroken: true}} {
		cfg, err := config.Parse([]byte(configYAML("http://127.0.0.1:1", "http://127.0.0.1:2", "http://127.0.0.1:3", "http://127.0.0.1:4", st)),
			func(k string) string { return map[string]string{"SOAK_HOOKS_SECRET": hooksSecret}[k] })
		require.NoError(t, err, "%+v", st)
		require.Len(t, cfg.Sources, len(soakSources))
	}
	q, err := gojq.Parse(hubAccepted)
	require.NoError(t, err)
	prog, err := gojq.Compile(q)
	require.NoError(t, err)
	for _, answer := range []map[string]any{
		{"status": 200, "body": map[string]any{"status": "COMPLETE"}},
		{"status": 200, "body": map[string]any{"status": "COMPLETE", "n": 1000}},
	} {
		v, ok := prog.Run(answer).Next()
		require.True(t, ok)
		require.Equal(t, true, v, "%v", answer)
	}
}
