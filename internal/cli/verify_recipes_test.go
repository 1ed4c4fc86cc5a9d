package cli_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/lab/fakethirdparty"
)

// recipe is a configuration of docs/destinations.md (testdata/destinations)
// with its URL pointed at a receiver and its token_env made a token_file
// (the tests share the process's environment).
func recipe(t *testing.T, name, url, receiverURL string, replace ...string) string {
	t.Helper()
	text, err := os.ReadFile("../../testdata/destinations/" + name + ".yaml")
	require.NoError(t, err)
	s := string(text)
	require.Contains(t, s, "url: "+url)
	s = strings.Replace(s, "url: "+url, "url: "+receiverURL, 1)
	for i := 0; i+1 < len(replace); i += 2 {
		require.Contains(t, s, replace[i])
		s = strings.Replace(s, replace[i], replace[i+1], 1)
	}
	return s
}

// exampleOf returns the example of id.
func exampleOf(t *testing.T, v verifyResult, id string) (kind string, here, there json.RawMessage) {
	t.Helper()
	for _, ex := range v.Examples {
		if ex.ID == id {
			return ex.Kind, ex.Here, ex.There
		}
	}
	t.Fatalf("no example of %s in %+v", id, v.Examples)
	return "", nil, nil
}

// TestVerifyRecipeHubSpot: the HubSpot recipe of docs/destinations.md,
// against a receiver that answers as HubSpot's contacts API does: rows
// upserted by email are read back with batch/read by idProperty (HubSpot's
// own properties and its string values are no drift), a contact lost
// there is missing (HubSpot's 207 OBJECT_NOT_FOUND), one edited in its UI
// stale; --heal sends both again and the source verifies clean.
func TestVerifyRecipeHubSpot(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const token = "pat-na1-recipe-token-0123456789"
	api := newHubspotAPI(token)
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	yaml := recipe(t, "hubspot", "https://api.hubapi.com", srv.URL,
		"token_env: HUBSPOT_TOKEN", "token_file: "+secretFile(t, t.TempDir(), "hubspot-token", token))
	cv := startConfigured(t, ctx, yaml, "contacts",
		`CREATE TABLE contacts (email text PRIMARY KEY, firstname text NOT NULL, lastname text NOT NULL)`,
		`INSERT INTO contacts SELECT 'c'||g||'@example.com', 'First'||g, 'Last'||g FROM generate_series(1, 150) g`,
		api.held, 150, "error")
	// HubSpot reads 100 inputs a call at most: the block's lookup_size
	// bounds a run asked for more.
	verifyCmd := func(args ...string) result {
		return cv.verify(ctx, append([]string{"--lookup-size", "500"}, args...)...)
	}

	api.set("c2@example.com", nil)
	api.set("c3@example.com", map[string]any{"firstname": "Edited in the UI"})
	r := verifyCmd("--json")
	require.Equal(t, 3, r.code, r.stdout+r.stderr)
	v := verifyJSON(t, r)
	require.Equal(t, [7]int64{150, 148, 1, 1, 0, 0, 0}, [7]int64{v.Checked, v.OK, v.Missing, v.Stale, v.Zombie, v.Unknown, v.Pending})
	kind, here, there := exampleOf(t, v, "c3@example.com")
	require.Equal(t, "stale", kind)
	require.JSONEq(t, `{"email": "c3@example.com", "firstname": "First3", "lastname": "Last3"}`, string(here))
	require.JSONEq(t, `{"email": "c3@example.com", "firstname": "Edited in the UI", "lastname": "Last3"}`, string(there))
	kind, _, there = exampleOf(t, v, "c2@example.com")
	require.Equal(t, "missing", kind)
	require.Equal(t, "null", string(there))

	r = verifyCmd("--heal")
	require.Equal(t, 3, r.code, r.stdout+r.stderr)
	require.Eventually(t, func() bool { return verifyCmd().code == 0 }, 30*time.Second, 100*time.Millisecond)
	api.mu.Lock()
	defer api.mu.Unlock()
	require.Equal(t, 0, api.refused, "no batch read of more than 100 inputs")
}

// TestVerifyRecipeMeilisearch: the Meilisearch recipe, against a receiver
// that answers as Meilisearch's documents API does: documents fetched by a
// filter on their ids, with a limit as large as the lookup (Meilisearch
// returns 20 without one), compared with the row and its id as the
// upsert wrote them.
func TestVerifyRecipeMeilisearch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const key = "meili-recipe-master-key-0123456789"
	api := newMeiliAPI(key)
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	yaml := recipe(t, "meilisearch", "https://meili.example.com", srv.URL,
		"token_env: MEILI_KEY", "token_file: "+secretFile(t, t.TempDir(), "meili-key", key))
	cv := startConfigured(t, ctx, yaml, "products",
		`CREATE TABLE products (id integer PRIMARY KEY, name text NOT NULL, stock integer NOT NULL)`,
		`INSERT INTO products SELECT g, 'Product '||g, g * 10 FROM generate_series(1, 60) g`,
		api.held, 60, "error")
	verifyCmd := func(args ...string) result {
		return cv.verify(ctx, append([]string{"--lookup-size", "25"}, args...)...)
	}

	api.set("2", nil)
	api.set("3", map[string]any{"id": "3", "name": "Product 3", "stock": 0})
	r := verifyCmd("--json")
	require.Equal(t, 3, r.code, r.stdout+r.stderr)
	v := verifyJSON(t, r)
	require.Equal(t, [7]int64{60, 58, 1, 1, 0, 0, 0}, [7]int64{v.Checked, v.OK, v.Missing, v.Stale, v.Zombie, v.Unknown, v.Pending})
	kind, here, there := exampleOf(t, v, "3")
	require.Equal(t, "stale", kind)
	require.JSONEq(t, `{"id": 3, "name": "Product 3", "stock": 30}`, string(here))
	require.JSONEq(t, `{"id": "3", "name": "Product 3", "stock": 0}`, string(there))

	r = verifyCmd("--heal")
	require.Equal(t, 3, r.code, r.stdout+r.stderr)
	require.Eventually(t, func() bool { return verifyCmd().code == 0 }, 30*time.Second, 100*time.Millisecond)
}

// TestVerifyRecipeElasticsearch: the Elasticsearch recipe, its header from
// the file, against the receiver the elasticsearch format tests use (the
// fake third party's bulk API): read back with _mget on the index.
func TestVerifyRecipeElasticsearch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const auth = "ApiKey c2VjcmV0LXJlY2lwZS1rZXk="
	fake := fakethirdparty.New(fakethirdparty.Config{Format: fakethirdparty.FormatElasticsearch, Lookup: true})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != auth {
			http.Error(w, `{"error":{"type":"security_exception"},"status":401}`, http.StatusUnauthorized)
			return
		}
		fake.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	yaml := recipe(t, "elasticsearch", "https://search.example.com:9200/orders", srv.URL+"/orders",
		"Authorization: {env: SEARCH_AUTH}", `Authorization: "`+auth+`"`)
	cv := startConfigured(t, ctx, yaml, "orders",
		`CREATE TABLE orders (id integer PRIMARY KEY, total integer NOT NULL)`,
		`INSERT INTO orders SELECT g, g * 100 FROM generate_series(1, 30) g`,
		func() int { return len(fake.Deliveries()) }, 30, "error")

	fake.ApplyDrift(fakethirdparty.Drift{
		Lose:    []string{"4"},
		Edit:    map[string]json.RawMessage{"5": json.RawMessage(`{"id": 5, "total": 1}`)},
		Unknown: []string{"6"},
	})
	r := cv.verify(ctx, "--json")
	require.Equal(t, 3, r.code, r.stdout+r.stderr)
	v := verifyJSON(t, r)
	require.Equal(t, [7]int64{30, 27, 1, 1, 0, 1, 0}, [7]int64{v.Checked, v.OK, v.Missing, v.Stale, v.Zombie, v.Unknown, v.Pending})
	kind, here, there := exampleOf(t, v, "5")
	require.Equal(t, "stale", kind)
	require.JSONEq(t, `{"id": 5, "total": 500}`, string(here))
	require.JSONEq(t, `{"id": 5, "total": 1}`, string(there))

	r = cv.verify(ctx, "--heal")
	require.Equal(t, 3, r.code, r.stdout+r.stderr)
	require.Eventually(t, func() bool { return verifyJSON(t, cv.verify(ctx, "--json")).OK == 29 }, 30*time.Second, 100*time.Millisecond)
}
