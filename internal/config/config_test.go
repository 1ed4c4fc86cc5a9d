package config_test

import (
	"bytes"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/config"
)

const valid = `
destinations:
  crm:
    url: https://api.example.com
    token_env: CRM_TOKEN
    rate_limit: 10
    rate_burst: 5
    max_in_flight: 2
  warehouse:
    url: http://127.0.0.1:9000/base
    rate_limit: 0
sources:
  - table: orders
    key: id
    columns: [status, total]
    destination: crm
    batch_size: 500
  - table: app.customers
    key: uuid
    destination: warehouse
    snapshot: false
  - name: orders-copy
    table: orders
    key: id
    destination: warehouse
`

func env(vars map[string]string) func(string) string {
	return func(k string) string { return vars[k] }
}

func TestParseValid(t *testing.T) {
	t.Parallel()
	cfg, err := config.Parse([]byte(valid), env(map[string]string{"CRM_TOKEN": " s3cr3t-token\n"}))
	require.NoError(t, err)

	require.Len(t, cfg.Destinations, 2)
	crm := cfg.Destination("crm")
	require.NotNil(t, crm)
	require.Equal(t, "https://api.example.com", crm.URL)
	require.Equal(t, "CRM_TOKEN", crm.TokenEnv)
	require.Equal(t, "s3cr3t-token", crm.Token.Reveal(), "surrounding space of the variable is trimmed")
	require.Equal(t, config.Limits{RateLimit: 10, RateBurst: 5, MaxInFlight: 2},
		crm.Limits(config.Limits{RateLimit: 3, RateBurst: 1, MaxInFlight: 4}))

	wh := cfg.Destination("warehouse")
	require.Empty(t, wh.Token.Reveal())
	require.Equal(t, config.Limits{RateLimit: 0, RateBurst: 1, MaxInFlight: 4},
		wh.Limits(config.Limits{RateLimit: 3, RateBurst: 1, MaxInFlight: 4}), "rate_limit: 0 is no limit, not unset")
	require.Nil(t, cfg.Destination("nope"))

	require.Len(t, cfg.Sources, 3)
	orders := cfg.Sources[0]
	require.Equal(t, "orders", orders.Name)
	require.Equal(t, "", orders.Schema)
	require.Equal(t, "orders", orders.Table)
	require.Equal(t, "id", orders.Key)
	require.Equal(t, []string{"status", "total"}, orders.Columns)
	require.Equal(t, "crm", orders.Destination)
	require.Equal(t, 500, orders.BatchSize)
	require.True(t, orders.Snapshot, "snapshot defaults to true")

	cust := cfg.Source("app.customers")
	require.NotNil(t, cust)
	require.Equal(t, "app", cust.Schema)
	require.Equal(t, "customers", cust.Table)
	require.Equal(t, "app.customers", cust.QualifiedTable())
	require.Nil(t, cust.Columns, "no columns: the whole row")
	require.Zero(t, cust.BatchSize)
	require.False(t, cust.Snapshot)

	require.Equal(t, "orders-copy", cfg.Sources[2].Name)
	require.Equal(t, "orders", cfg.Sources[2].Table)
}

func TestTokenNeverPrinted(t *testing.T) {
	t.Parallel()
	cfg, err := config.Parse([]byte(valid), env(map[string]string{"CRM_TOKEN": "s3cr3t-token"}))
	require.NoError(t, err)
	d := cfg.Destination("crm")
	var logs bytes.Buffer
	slog.New(slog.NewJSONHandler(&logs, nil)).Info("x", slog.Any("destination", d), slog.Any("token", d.Token))
	for _, s := range []string{
		fmt.Sprintf("%v", *d), fmt.Sprintf("%+v", *d), fmt.Sprintf("%#v", *d), fmt.Sprintf("%s %q", d.Token, d.Token),
		fmt.Sprint(cfg), logs.String(),
	} {
		require.NotContains(t, s, "s3cr3t")
	}
	require.Contains(t, fmt.Sprintf("%v", d.Token), "[redacted]")
}

func TestNilGetenvReadsNoToken(t *testing.T) {
	t.Parallel()
	cfg, err := config.Parse([]byte(valid), nil)
	require.NoError(t, err, "migrate needs no token: a missing variable is no error then")
	require.Empty(t, cfg.Destination("crm").Token.Reveal())
}

func TestLoad(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "syncer.yaml")
	require.NoError(t, os.WriteFile(path, []byte(valid), 0o600))
	cfg, err := config.Load(path, env(map[string]string{"CRM_TOKEN": "x"}))
	require.NoError(t, err)
	require.Equal(t, path, cfg.Path)

	_, err = config.Load(filepath.Join(dir, "missing.yaml"), nil)
	require.True(t, config.IsConfigError(err))
	require.Equal(t, "no such file", err.Error())
}

// edit returns valid with old replaced by new, once.
func edit(t *testing.T, old, new string) string {
	t.Helper()
	require.Equal(t, 1, strings.Count(valid, old), "edit %q", old)
	return strings.Replace(valid, old, new, 1)
}

func TestParseRefuses(t *testing.T) {
	t.Parallel()
	const firstSource = "  - table: orders\n    key: id\n"
	tests := []struct {
		name string
		file func(t *testing.T) string
		env  map[string]string
		want string
	}{
		{"empty file", func(*testing.T) string { return "" }, nil, "the file is empty"},
		{"not yaml", func(*testing.T) string { return "destinations: [\n" }, nil, "not valid YAML: did not find expected node content (line 1)"},
		{"two documents", func(*testing.T) string { return valid + "---\nsources: []\n" }, nil, "more than one YAML document"},
		{"not a mapping", func(*testing.T) string { return "- a\n" }, nil, "must be a mapping with destinations and sources (line 1)"},
		{"unknown top field", func(*testing.T) string { return valid + "source: []\n" }, nil, `unknown field "source" (known: destinations, sources)`},
		{"no destinations", func(*testing.T) string { return "sources: []\n" }, nil, "destinations: required: at least one destination"},
		{"empty destinations", func(t *testing.T) string { return "destinations: {}\nsources: []\n" }, nil, "destinations: required: at least one destination"},
		{"destinations a list", func(t *testing.T) string { return "destinations: [a]\n" }, nil, "destinations: must be a mapping of names to destinations"},
		{"destination name", func(t *testing.T) string { return edit(t, "  warehouse:", "  ware house:") }, nil, `destinations: "ware house" may only hold letters, digits and _ - . $`},
		{"destination twice", func(t *testing.T) string { return edit(t, "  warehouse:", "  crm:") }, nil, "destinations.crm: given twice"},
		{"destination not a mapping", func(t *testing.T) string { return "destinations:\n  crm: https://x\n" }, nil, "destinations.crm: must be a mapping with url"},
		{"destination unknown field", func(t *testing.T) string { return edit(t, "    rate_burst: 5", "    rate_brust: 5") }, nil, `destinations.crm: unknown field "rate_brust" (known: url, token_env, token_file, auth, tls, rate_limit, rate_burst, max_in_flight, tenants, verify_every, verify_heal, format, headers, signing_secret_env, signing_secret_file, event_source, event_type_prefix, request, deletes, response, program_timeout, verify) (line 7)`},
		{"auth beside token_env", func(t *testing.T) string {
			return edit(t, "    rate_limit: 10\n", "    rate_limit: 10\n    auth: {type: basic, username_env: U, password_env: P}\n")
		}, map[string]string{"CRM_TOKEN": "t", "U": "u", "P": "p"}, "destinations.crm.auth: and token_env or token_file are exclusive: put the token in auth"},
		{"auth type unknown", func(t *testing.T) string {
			return edit(t, "    rate_limit: 0\n", "    rate_limit: 0\n    auth: {type: digest}\n")
		}, map[string]string{"CRM_TOKEN": "t"}, "destinations.warehouse.auth.type: must be bearer, basic or oauth2_client_credentials"},
		{"basic without password", func(t *testing.T) string {
			return edit(t, "    rate_limit: 0\n", "    rate_limit: 0\n    auth: {type: basic, username_env: U}\n")
		}, map[string]string{"CRM_TOKEN": "t", "U": "u"}, "destinations.warehouse.auth.password_env: required with type basic: give password_env or password_file"},
		{"oauth2 without token_url", func(t *testing.T) string {
			return edit(t, "    rate_limit: 0\n", "    rate_limit: 0\n    auth: {type: oauth2_client_credentials, client_id_env: I, client_secret_env: S}\n")
		}, map[string]string{"CRM_TOKEN": "t", "I": "i", "S": "s"}, "destinations.warehouse.auth.token_url: required: the token endpoint's http or https URL, without credentials"},
		{"auth field of another type", func(t *testing.T) string {
			return edit(t, "    rate_limit: 0\n", "    rate_limit: 0\n    auth: {type: bearer, token_env: T, scopes: [a]}\n")
		}, map[string]string{"CRM_TOKEN": "t", "T": "t"}, "destinations.warehouse.auth.scopes: does not go with type bearer"},
		{"tls cert without key", func(t *testing.T) string {
			return edit(t, "    rate_limit: 0\n", "    rate_limit: 0\n    tls: {cert_file: /c.pem}\n")
		}, map[string]string{"CRM_TOKEN": "t"}, "destinations.warehouse.tls.key_file: cert_file and key_file go together: give both or neither"},
		{"tls min_version", func(t *testing.T) string {
			return edit(t, "    rate_limit: 0\n", "    rate_limit: 0\n    tls: {min_version: \"1.1\"}\n")
		}, map[string]string{"CRM_TOKEN": "t"}, `destinations.warehouse.tls.min_version: must be "1.2" or "1.3"`},
		{"tls no roots", func(t *testing.T) string {
			return edit(t, "    rate_limit: 0\n", "    rate_limit: 0\n    tls: {system_roots: false}\n")
		}, map[string]string{"CRM_TOKEN": "t"}, "destinations.warehouse.tls.system_roots: false needs ca_file: no root would be left"},
		{"destination field twice", func(t *testing.T) string { return edit(t, "    rate_burst: 5", "    rate_burst: 5\n    rate_burst: 6") }, nil, "destinations.crm.rate_burst: given twice"},
		{"url missing", func(t *testing.T) string { return edit(t, "    url: https://api.example.com\n", "") }, nil, "destinations.crm.url: required (line 4)"},
		{"url scheme", func(t *testing.T) string { return edit(t, "https://api.example.com", "ftp://api.example.com") }, nil, "destinations.crm.url: must be an http or https URL (line 4)"},
		{"url no host", func(t *testing.T) string { return edit(t, "https://api.example.com", "https:///v1") }, nil, "destinations.crm.url: must be an http or https URL"},
		{"url credentials", func(t *testing.T) string {
			return edit(t, "https://api.example.com", "https://u:hunter2@api.example.com")
		}, nil, "destinations.crm.url: must not hold credentials"},
		{"url query", func(t *testing.T) string {
			return edit(t, "https://api.example.com", "https://api.example.com?key=hunter2")
		}, nil, "destinations.crm.url: must not have a query or a fragment"},
		{"token_env name", func(t *testing.T) string { return edit(t, "CRM_TOKEN", "CRM-TOKEN") }, nil, "destinations.crm.token_env: must be the name of an environment variable"},
		{"token missing", func(t *testing.T) string { return valid }, map[string]string{}, "destinations.crm.token_env: environment variable CRM_TOKEN is not set or empty (line 5)"},
		{"token blank", func(t *testing.T) string { return valid }, map[string]string{"CRM_TOKEN": "  "}, "environment variable CRM_TOKEN is not set or empty"},
		{"rate_limit negative", func(t *testing.T) string { return edit(t, "rate_limit: 10", "rate_limit: -1") }, nil, "destinations.crm.rate_limit: must be a number of requests a second, 0 or more"},
		{"rate_limit text", func(t *testing.T) string { return edit(t, "rate_limit: 10", "rate_limit: fast") }, nil, "destinations.crm.rate_limit: must be a number"},
		{"rate_limit infinite", func(t *testing.T) string { return edit(t, "rate_limit: 10", "rate_limit: .inf") }, nil, "destinations.crm.rate_limit: must be a number"},
		{"rate_burst zero", func(t *testing.T) string { return edit(t, "rate_burst: 5", "rate_burst: 0") }, nil, "destinations.crm.rate_burst: must be a whole number, 1 or more (line 7)"},
		{"max_in_flight fraction", func(t *testing.T) string { return edit(t, "max_in_flight: 2", "max_in_flight: 1.5") }, nil, "destinations.crm.max_in_flight: must be a whole number, 1 or more"},
		{"no sources", func(t *testing.T) string { return valid[:strings.Index(valid, "sources:")] }, nil, "sources: required: at least one source"},
		{"empty sources", func(t *testing.T) string { return valid[:strings.Index(valid, "sources:")] + "sources: []\n" }, nil, "sources: required: at least one source"},
		{"sources a mapping", func(t *testing.T) string { return valid[:strings.Index(valid, "sources:")] + "sources: {a: 1}\n" }, nil, "sources: must be a list of sources"},
		{"source not a mapping", func(t *testing.T) string { return valid + "  - orders\n" }, nil, "sources[3]: must be a mapping with table, key and destination"},
		{"source unknown field", func(t *testing.T) string { return edit(t, "    batch_size: 500", "    batchsize: 500") }, nil, `sources[0] (orders): unknown field "batchsize" (known: name, table, key, columns, destination, batch_size, snapshot, changed_at, where, tenant, lanes) (line 17)`},
		{"table missing", func(t *testing.T) string { return edit(t, firstSource, "  - key: id\n") }, nil, "sources[0]: table: required (line 13)"},
		{"table a list", func(t *testing.T) string { return edit(t, firstSource, "  - table: [orders]\n    key: id\n") }, nil, "sources[0]: table: must be a string"},
		{"table three parts", func(t *testing.T) string { return edit(t, "table: app.customers", "table: db.app.customers") }, nil, "sources[1] (db.app.customers): table: must be table or schema.table (line 18)"},
		{"table empty schema", func(t *testing.T) string { return edit(t, "table: app.customers", "table: .customers") }, nil, "sources[1] (.customers): table: must not be empty"},
		{"table too long", func(t *testing.T) string {
			return edit(t, "table: app.customers", "table: app."+strings.Repeat("c", 64))
		}, nil, "table: is longer than 63 bytes"},
		{"key missing", func(t *testing.T) string { return edit(t, firstSource, "  - table: orders\n") }, nil, "sources[0] (orders): key: required: the table's primary key (a column, or a list of its columns) (line 13)"},
		{"key twice", func(t *testing.T) string {
			return edit(t, firstSource, "  - table: orders\n    key: [tenant_id, tenant_id]\n")
		}, nil, `sources[0] (orders): key: "tenant_id" is listed twice`},
		{"key empty list", func(t *testing.T) string { return edit(t, firstSource, "  - table: orders\n    key: []\n") }, nil, "sources[0] (orders): key: must name at least one column"},
		{"columns scalar", func(t *testing.T) string { return edit(t, "columns: [status, total]", "columns: status") }, nil, "sources[0] (orders): columns: must be a list of column names (omit it to export the whole row)"},
		{"columns empty", func(t *testing.T) string { return edit(t, "columns: [status, total]", "columns: []") }, nil, "sources[0] (orders): columns: must name at least one column"},
		{"columns twice", func(t *testing.T) string { return edit(t, "columns: [status, total]", "columns: [status, status]") }, nil, `sources[0] (orders): columns: "status" is listed twice`},
		{"columns nested", func(t *testing.T) string { return edit(t, "columns: [status, total]", "columns: [[status]]") }, nil, "sources[0] (orders): columns: must be a list of column names"},
		{"destination missing", func(t *testing.T) string { return edit(t, "    destination: crm\n", "") }, nil, "sources[0] (orders): destination: required"},
		{"destination unknown", func(t *testing.T) string { return edit(t, "    destination: crm\n", "    destination: cmr\n") }, nil, `sources[0] (orders): destination: no destination "cmr" (destinations: crm, warehouse) (line 16)`},
		{"destination named default", func(t *testing.T) string { return edit(t, "  warehouse:\n", "  default:\n") }, nil, `destinations.default: "default" is the destination the SYNCER_THIRDPARTY_* settings configure`},
		{"batch_size zero", func(t *testing.T) string { return edit(t, "batch_size: 500", "batch_size: 0") }, nil, "sources[0] (orders): batch_size: must be a whole number, 1 or more"},
		{"snapshot yes", func(t *testing.T) string { return edit(t, "snapshot: false", "snapshot: nope") }, nil, "sources[1] (app.customers): snapshot: must be true or false"},
		{"names collide", func(t *testing.T) string { return edit(t, "  - name: orders-copy\n", "  - name: orders\n") }, nil, `sources[2] (orders): name: "orders" is already the name of sources[0]; give one of them another name`},
		{"same table twice unnamed", func(t *testing.T) string { return edit(t, "  - name: orders-copy\n", "  -\n") }, nil, `sources[2] (orders): name: "orders" is already the name of sources[0]`},
		{"name empty", func(t *testing.T) string { return edit(t, "  - name: orders-copy\n", "  - name: ''\n") }, nil, "sources[2] (orders): name: must not be empty"},
		{"name resources", func(t *testing.T) string { return edit(t, "  - name: orders-copy\n", "  - name: resources\n") }, nil, `name: "resources" is the name of the source that is the table resources`},
		{"table name not a name", func(t *testing.T) string { return edit(t, "table: app.customers", "table: app.My Customers") }, nil, `sources[1] (app.My Customers): name: "app.My Customers" may only hold letters, digits and _ - . $; give the source a name`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			vars := tt.env
			if vars == nil {
				vars = map[string]string{"CRM_TOKEN": "t"}
			}
			_, err := config.Parse([]byte(tt.file(t)), env(vars))
			require.Error(t, err)
			require.True(t, config.IsConfigError(err), "%T", err)
			require.Contains(t, err.Error(), tt.want)
			require.NotContains(t, err.Error(), "\n", "one line")
			require.NotContains(t, err.Error(), "hunter2", "no secret of a URL in an error")
		})
	}
}

// A source may name default, the destination of the SYNCER_THIRDPARTY_*
// settings: one list of destinations, the file's and that one.
func TestSourceToTheDefaultDestination(t *testing.T) {
	t.Parallel()
	cfg, err := config.Parse([]byte(strings.Replace(valid, "    destination: warehouse\n    snapshot: false", "    destination: default\n    snapshot: false", 1)),
		env(map[string]string{"CRM_TOKEN": "x"}))
	require.NoError(t, err)
	require.Equal(t, config.DefaultDestination, cfg.Source("app.customers").Destination)
	require.Nil(t, cfg.Destination(config.DefaultDestination), "not one of the file's")
}
