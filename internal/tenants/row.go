package tenants

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/syncer-dev/syncer/internal/database"
	"github.com/syncer-dev/syncer/internal/delivery"
)

// connection is one tenant's connection row, decoded. It holds secrets:
// it never prints itself, and nothing of it but extra reaches a format.
type connection struct {
	url                    string
	token                  string
	username, password     string
	clientID, clientSecret string
	refreshToken           string
	headers                map[string]string
	// limits are the row's rate_limit, rate_burst and max_in_flight.
	limits limits
	// extra are the row's other columns: $tenant.<column>.
	extra map[string]any
	// sum is a digest of the row as read without its refresh token (a
	// rotation changes that, and is ours), to tell a changed row.
	sum [sha256.Size]byte
	// account is a digest of the account the row sends the tenant to:
	// its url and its account column, never a secret (accountOf).
	account string
}

func (c *connection) String() string   { return "[tenant connection: redacted]" }
func (c *connection) GoString() string { return c.String() }

// readConnection runs the query for tenant: nil without a row; a failure
// of the run is returned as the database gave it. PostgreSQL
// makes the row a JSON object (to_jsonb), so that any column type reads
// as $tenant sees it.
func readConnection(ctx context.Context, q database.Querier, query, tenant string) (*connection, error) {
	rows, err := q.Query(ctx, connectionSQL(query), tenant)
	if err != nil {
		return nil, err // Registry.read says what failed
	}
	return scanConnection(rows)
}

// connectionSQL is the statement that runs query for a tenant ($1): its
// row as one JSON object, two rows at most.
func connectionSQL(query string) string {
	return "SELECT to_jsonb(tenant_connection) FROM (" + trimStatement(query) + "\n) AS tenant_connection LIMIT 2"
}

// scanConnection reads what connectionSQL gave, and closes rows.
func scanConnection(rows pgx.Rows) (*connection, error) {
	var raw [][]byte
	for rows.Next() {
		var b []byte
		if err := rows.Scan(&b); err != nil {
			rows.Close()
			return nil, err // Registry.read says what failed
		}
		raw = append(raw, b)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err // Registry.read says what failed
	}
	return connectionOf(raw)
}

// connectionOf is the connection of what connectionSQL gave (each row's
// one column): nil without a row; a rowError when the tenant cannot be
// sent with it.
func connectionOf(raw [][]byte) (*connection, error) {
	switch len(raw) {
	case 0:
		return nil, nil
	case 1:
		c, err := decodeConnection(raw[0])
		if err != nil {
			return nil, &rowError{err}
		}
		return c, nil
	default:
		return nil, &rowError{errors.New("tenants.query: gives more than one row for the tenant: it must give at most one")}
	}
}

// rowError is a row read that the tenant cannot be sent with: the
// tenant's own state, not a failure of the database.
type rowError struct{ err error }

func (e *rowError) Error() string { return e.err.Error() }
func (e *rowError) Unwrap() error { return e.err }

// decodeConnection reads a row's JSON object. Its errors name the column,
// never its value.
func decodeConnection(raw []byte) (*connection, error) {
	var row map[string]any
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&row); err != nil {
		return nil, errors.New("tenants.query: the row does not read as an object")
	}
	c := &connection{extra: map[string]any{}}
	text := func(col string) (string, error) {
		switch v := row[col].(type) {
		case nil:
			return "", nil
		case string:
			return strings.TrimSpace(v), nil
		default:
			return "", fmt.Errorf("tenants.query: column %s must be text", col)
		}
	}
	for col, to := range map[string]*string{
		ColumnURL: &c.url, ColumnToken: &c.token, ColumnUsername: &c.username, ColumnPassword: &c.password,
		ColumnClientID: &c.clientID, ColumnClientSecret: &c.clientSecret, ColumnRefreshToken: &c.refreshToken,
	} {
		v, err := text(col)
		if err != nil {
			return nil, err
		}
		*to = v
	}
	if err := c.readHeaders(row[ColumnHeaders]); err != nil {
		return nil, err
	}
	if err := c.limits.read(row); err != nil {
		return nil, err
	}
	for col, v := range row {
		// account is known (it names the account) and $tenant.account
		// too, as it was before it was known.
		if (!slices.Contains(Columns, col) || col == ColumnAccount) && col != reservedColumn {
			c.extra[col] = v
		}
	}
	if c.url != "" {
		u, err := url.Parse(c.url)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil {
			// Never quoted: a URL may hold a secret.
			return nil, errors.New("tenants.query: column url must be an http or https URL without credentials")
		}
	}
	kinds := 0
	for _, given := range []bool{c.token != "", c.username != "" || c.password != "", c.refreshToken != "", c.clientID != "" && c.refreshToken == "" || c.clientSecret != "" && c.refreshToken == ""} {
		if given {
			kinds++
		}
	}
	switch {
	case kinds > 1:
		return nil, errors.New("tenants.query: the row gives credentials of more than one kind (token, username and password, client_id and client_secret, refresh_token): give one")
	case (c.username == "") != (c.password == ""):
		return nil, errors.New("tenants.query: columns username and password go together")
	case c.refreshToken == "" && (c.clientID == "") != (c.clientSecret == ""):
		return nil, errors.New("tenants.query: columns client_id and client_secret go together")
	}
	c.account = accountOf(c.url, row[ColumnAccount])
	delete(row, ColumnRefreshToken)
	canon, _ := json.Marshal(row) // sorted keys: the same row, the same digest
	c.sum = sha256.Sum256(canon)
	return c, nil
}

// accountOf is the fingerprint of the account a row sends its tenant to:
// a digest of its url and its account column (as JSON, any type), hex.
// It is kept in syncer_state, so it holds no secret and cannot give one
// back.
func accountOf(url string, account any) string {
	acc, _ := json.Marshal(account) // a value decoded from JSON encodes
	h := sha256.New()
	h.Write([]byte("url\x00" + url + "\x00account\x00"))
	h.Write(acc)
	return hex.EncodeToString(h.Sum(nil))
}

// readHeaders reads the headers column: a JSON object of strings, or text
// holding one.
func (c *connection) readHeaders(v any) error {
	if s, ok := v.(string); ok {
		var m any
		if json.Unmarshal([]byte(s), &m) != nil {
			return errors.New("tenants.query: column headers must be a JSON object of header names to strings")
		}
		v = m
	}
	if v == nil {
		return nil
	}
	m, ok := v.(map[string]any)
	if !ok {
		return errors.New("tenants.query: column headers must be a JSON object of header names to strings")
	}
	c.headers = map[string]string{}
	for k, hv := range m {
		s, ok := hv.(string)
		if !ok || k == "" || strings.ContainsAny(k+s, "\r\n") || strings.ContainsAny(k, " \t:") {
			return fmt.Errorf("tenants.query: column headers: header %q must be a name with a one-line string", k)
		}
		c.headers[k] = s
	}
	return nil
}

// HasRow reports whether the tenants query of s gives tenant a row, usable
// or not; nothing of the row is kept or returned. A command that names a
// tenant asks it (docs/protocol.md section 10.1, "Commands name real
// tenants").
//
// It runs as the daemon's reads do, in a transaction whose statement and
// lock timeouts are tenants.timeout, set before the statement is parsed
// (or prepared, or described) in it: a connections table locked by a
// migration fails it in that time with a *QueryError saying so, where the
// command waited in the lock's queue with no end.
func HasRow(ctx context.Context, db database.DB, s *Settings, tenant string) (bool, error) {
	timeout := cmp.Or(s.Timeout, QueryTimeoutDefault)
	ctx, cancel := context.WithTimeout(ctx, timeout+queryGrace)
	defer cancel()
	ms := strconv.FormatInt(max(timeout.Milliseconds(), 1), 10) + "ms"
	var c *connection
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, readTimeoutsSQL, ms); err != nil {
			return err
		}
		var err error
		c, err = readConnection(ctx, tx, s.Query, tenant)
		return err
	})
	var re *rowError
	switch {
	case errors.As(err, &re):
		return true, nil
	case err != nil:
		_, err = readOutcome(nil, err, timeout)
		return false, err
	}
	return c != nil, nil
}

// limits are a tenant's own limits from its row: 0 where the row gives
// none (NULL or no such column), the destination's.
type limits struct {
	rateLimit   float64
	rateBurst   int
	maxInFlight int
}

// read reads the limits' columns: positive numbers, whole for rate_burst
// and max_in_flight. Text holding a number is taken too (a column of a
// text type). Errors name the column, never its value.
func (l *limits) read(row map[string]any) error {
	num := func(col string) (float64, bool, error) {
		var text string
		switch v := row[col].(type) {
		case nil:
			return 0, false, nil
		case json.Number:
			text = v.String()
		case string:
			text = strings.TrimSpace(v)
		default:
			return 0, false, fmt.Errorf("tenants.query: column %s must be a number", col)
		}
		f, err := strconv.ParseFloat(text, 64)
		if err != nil || math.IsNaN(f) || math.IsInf(f, 0) || f <= 0 {
			return 0, false, fmt.Errorf("tenants.query: column %s must be a positive number (NULL: the destination's)", col)
		}
		return f, true, nil
	}
	whole := func(col string) (int, error) {
		f, ok, err := num(col)
		if err != nil || !ok {
			return 0, err
		}
		if f != math.Trunc(f) || f > math.MaxInt32 {
			return 0, fmt.Errorf("tenants.query: column %s must be a whole number", col)
		}
		return int(f), nil
	}
	var err error
	if l.rateLimit, _, err = num(ColumnRateLimit); err != nil {
		return err
	}
	if l.rateBurst, err = whole(ColumnRateBurst); err != nil {
		return err
	}
	l.maxInFlight, err = whole(ColumnMaxInFlight)
	return err
}

// apply sets l's limits on a tenant's deliverer settings, each where the
// row gives one.
func (l limits) apply(c *delivery.Config) {
	if l.rateLimit > 0 {
		c.RateLimit = l.rateLimit
	}
	if l.rateBurst > 0 {
		c.RateBurst = l.rateBurst
	}
	if l.maxInFlight > 0 {
		c.MaxInFlight = l.maxInFlight
	}
}
