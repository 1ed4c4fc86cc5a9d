package formats_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/config"
	"github.com/syncer-dev/syncer/internal/formats"
	"github.com/syncer-dev/syncer/internal/thirdparty"
)

var update = flag.Bool("update", false, "rewrite the golden request files of testdata/destinations")

const cookbookDir = "../../testdata/destinations"

// cookbookEnv holds the variables the cookbook's configurations name.
var cookbookEnv = map[string]string{
	"HOOKS_SECRET": "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "SEARCH_AUTH": "ApiKey c2VjcmV0",
	"HUBSPOT_TOKEN": "pat-na1-x", "SEGMENT_AUTH": "Basic d2s6", "MEILI_KEY": "k", "REST_TOKEN": "t",
}

// cookbookBatch is the batch every recipe renders: a text key that needs
// escaping in a URL, an update's later version, a tombstone.
func cookbookBatch() *thirdparty.Batch {
	return &thirdparty.Batch{Source: "orders", Time: time.Date(2026, 11, 24, 13, 0, 0, 0, time.UTC), Items: []thirdparty.Item{
		{ID: "ann@example.com", Version: 3, Payload: json.RawMessage(`{"email": "ann@example.com", "lastname": "Lee", "firstname": "Ann"}`)},
		{ID: "bö/b x?#%", Version: 5, Payload: json.RawMessage(`{"email": "bob@example.com", "lastname": "Bö", "firstname": "Bob", "n": 12345678901234567890}`)},
		{ID: "cy@example.com", Version: 7, Deleted: true},
	}}
}

// render writes a recipe's requests as a golden file shows them: the
// request line, the content type and the body of each.
func render(reqs []thirdparty.Request) []byte {
	var b bytes.Buffer
	for i, r := range reqs {
		if i > 0 {
			b.WriteString("\n")
		}
		method := r.Method
		if method == "" {
			method = http.MethodPost
		}
		fmt.Fprintf(&b, "%s {url}%s\n", method, r.Path)
		if r.ContentType != "" {
			fmt.Fprintf(&b, "Content-Type: %s\n", r.ContentType)
		}
		if r.Sign != nil {
			b.WriteString("webhook-id, webhook-timestamp, webhook-signature: signed on every send\n")
		}
		b.WriteString("\n")
		b.Write(r.Body)
		if len(r.Body) > 0 && r.Body[len(r.Body)-1] != '\n' {
			b.WriteString("\n")
		}
	}
	return b.Bytes()
}

// TestCookbookGolden: every configuration of docs/destinations.md is in
// testdata/destinations, is valid, appears in the doc verbatim, and makes
// exactly the requests of its golden file.
func TestCookbookGolden(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../../docs/destinations.md")
	require.NoError(t, err)
	files, err := filepath.Glob(filepath.Join(cookbookDir, "*.yaml"))
	require.NoError(t, err)
	require.Len(t, files, 6)
	for _, file := range files {
		name := strings.TrimSuffix(filepath.Base(file), ".yaml")
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			text, err := os.ReadFile(file)
			require.NoError(t, err)
			require.Contains(t, string(doc), string(text), "docs/destinations.md shows %s verbatim", file)
			cfg, err := config.Parse(text, func(k string) string { return cookbookEnv[k] })
			require.NoError(t, err)
			f, err := formats.New(cfg.Destinations[0].Format.Spec(), "inst-cookbook")
			require.NoError(t, err)
			reqs, err := f.Requests(cookbookBatch())
			require.NoError(t, err)
			got := render(reqs)
			again, err := f.Requests(cookbookBatch())
			require.NoError(t, err)
			require.Equal(t, string(got), string(render(again)), "the same batch makes the same requests")
			golden := filepath.Join(cookbookDir, name+".golden")
			if *update {
				require.NoError(t, os.WriteFile(golden, got, 0o644))
			}
			want, err := os.ReadFile(golden)
			require.NoError(t, err)
			require.Equal(t, string(want), string(got))
		})
	}
}
