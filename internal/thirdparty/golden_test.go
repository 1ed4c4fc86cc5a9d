package thirdparty_test

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/thirdparty"
)

// goldenDir holds the golden request bodies (testdata/README.md).
const goldenDir = "../../testdata/batches"

type goldenCase struct {
	name  string
	items []thirdparty.Item
	body  []byte
}

// goldenCases reads every <case>.items.json and its <case>.body.json.
func goldenCases(t *testing.T) []goldenCase {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(goldenDir, "*.items.json"))
	require.NoError(t, err)
	require.NotEmpty(t, paths, "no golden cases in %s", goldenDir)
	var out []goldenCase
	for _, p := range paths {
		raw, err := os.ReadFile(p)
		require.NoError(t, err)
		var in []struct {
			ID      string  `json:"id"`
			Version int64   `json:"version"`
			Payload *string `json:"payload"`
			Deleted bool    `json:"deleted"`
		}
		dec := json.NewDecoder(strings.NewReader(string(raw)))
		dec.DisallowUnknownFields()
		require.NoError(t, dec.Decode(&in), p)
		c := goldenCase{name: strings.TrimSuffix(filepath.Base(p), ".items.json")}
		for _, it := range in {
			_, err := strconv.ParseInt(it.ID, 10, 64)
			require.NoError(t, err, p)
			item := thirdparty.Item{ID: it.ID, Version: it.Version, Deleted: it.Deleted}
			if it.Payload != nil {
				require.False(t, it.Deleted, "%s: a tombstone has no payload", p)
				item.Payload = json.RawMessage(*it.Payload)
			}
			c.items = append(c.items, item)
		}
		c.body, err = os.ReadFile(filepath.Join(goldenDir, c.name+".body.json"))
		require.NoError(t, err)
		out = append(out, c)
	}
	return out
}

func TestGoldenBodies(t *testing.T) {
	t.Parallel()
	for _, tc := range goldenCases(t) {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.True(t, json.Valid(tc.body), "the golden body is JSON")
			require.Equal(t, string(tc.body), string(thirdparty.AppendBatch(nil, tc.items)))

			got, err := thirdparty.DecodeBatch(tc.body)
			require.NoError(t, err)
			require.Equal(t, string(tc.body), string(thirdparty.AppendBatch(nil, got)), "decode and encode again is byte-identical")

			ids := make([]string, len(tc.items))
			for i := range tc.items {
				ids[i] = tc.items[i].ID
			}
			for _, send := range []struct {
				name string
				push func(c *thirdparty.Client) (*thirdparty.Result, error)
			}{
				{"Push", func(c *thirdparty.Client) (*thirdparty.Result, error) {
					return c.Push(t.Context(), "golden", tc.items)
				}},
				{"PushBody", func(c *thirdparty.Client) (*thirdparty.Result, error) {
					return c.PushBody(t.Context(), "golden", tc.body, ids)
				}},
			} {
				b := setup(t, func(w http.ResponseWriter, r *http.Request) {
					_, _ = io.WriteString(w, `{"results":[]}`)
				}, nil)
				res, err := send.push(b.client)
				require.NoError(t, err, send.name)
				require.Empty(t, res.Rejected)
				reqs := b.requests()
				require.Len(t, reqs, 1)
				require.Equal(t, string(tc.body), string(reqs[0].Body), "%s: received byte for byte", send.name)
			}
		})
	}
}
