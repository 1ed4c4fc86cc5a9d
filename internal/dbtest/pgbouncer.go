package dbtest

import (
	"context"
	"net/url"
	"os/user"
	"strconv"
	"strings"
	"testing"

	"github.com/syncer-dev/syncer/internal/lab/pgbouncer"
)

// PgBouncer is a PgBouncer started for one test in front of the test
// database (internal/lab/pgbouncer), with PgBouncer's stock settings but
// for the pool mode.
type PgBouncer struct {
	// Addr is where it listens, 127.0.0.1:port.
	Addr string
	p    *pgbouncer.Process
}

// Log returns what PgBouncer logged so far.
func (p *PgBouncer) Log() string { return p.p.Log() }

// URL returns dsn with its host and port replaced by the PgBouncer's.
func (p *PgBouncer) URL(tb testing.TB, dsn string) string {
	tb.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		tb.Fatalf("dbtest: pgbouncer: parse url: %v", err)
	}
	u.Host = p.Addr
	return u.String()
}

// StartPgBouncer starts Debian's pgbouncer on a free loopback port, in
// front of the database of URL(), in mode ("session", "transaction" or
// "statement"), with auth_type trust, and stops it when the test ends. Its
// settings are PgBouncer's stock ones (ignore_startup_parameters =
// extra_float_digits, server_reset_query = DISCARD ALL) but for the pool
// mode. It returns once a query through it to the test database answers,
// within 30 s, or fails the test with PgBouncer's log. A machine without
// pgbouncer fails the test: install it (apt-get install pgbouncer;
// .ci/run does). users are roles it lets in besides postgres, the URL's
// and the process's (NewRole's).
func StartPgBouncer(tb testing.TB, mode string, users ...string) *PgBouncer {
	tb.Helper()
	db, err := url.Parse(URL())
	if err != nil {
		tb.Fatalf("dbtest: parse url: %v", err)
	}
	cfg := pgbouncer.Config{
		Dir:              tb.TempDir(),
		ServerHost:       db.Hostname(),
		ServerPort:       5432,
		Mode:             mode,
		ServerResetQuery: "DISCARD ALL",
		ProbeDB:          strings.TrimPrefix(db.Path, "/"),
	}
	if p, err := strconv.Atoi(db.Port()); err == nil {
		cfg.ServerPort = p
	}
	if db.User != nil && db.User.Username() != "" {
		cfg.Users = append(cfg.Users, db.User.Username())
		cfg.ProbeUser = db.User.Username()
	}
	if me, err := user.Current(); err == nil {
		cfg.Users = append(cfg.Users, me.Username)
	}
	cfg.Users = append(cfg.Users, users...)
	p, err := pgbouncer.Start(context.Background(), cfg)
	if err != nil {
		tb.Fatalf("dbtest: %v", err)
	}
	tb.Cleanup(p.Stop)
	return &PgBouncer{Addr: p.Addr(), p: p}
}

// TxPooler is a schema behind a PgBouncer in transaction mode, as a
// daemon sees it: the URL through the pooler and the direct URL
// (SYNCER_DIRECT_URL).
type TxPooler struct {
	*PgBouncer
	// Role is the login role of Pooled, named after the schema, whose
	// sessions start with the schema on their search_path (NewRole).
	Role string
	// Pooled is the schema's URL through the PgBouncer, as Role, with no
	// search_path (a transaction pooler passes none in the startup
	// packet) and no application_name.
	Pooled string
	// Direct is dsn with no application_name: a daemon names its own
	// sessions after its pid, which says which daemon holds a lock.
	Direct string
}

// StartTxPooler starts a PgBouncer in transaction mode (StartPgBouncer)
// in front of schema, whose URL straight to PostgreSQL is dsn, with a role
// of its own (NewRole).
func StartTxPooler(tb testing.TB, dsn, schema string) *TxPooler {
	tb.Helper()
	role := NewRole(tb, schema)
	pgb := StartPgBouncer(tb, "transaction", role)
	u, err := url.Parse(pgb.URL(tb, dsn))
	if err != nil {
		tb.Fatalf("dbtest: pgbouncer: parse url: %v", err)
	}
	u.User = url.User(role)
	q := u.Query()
	q.Del("search_path")
	q.Del("application_name")
	u.RawQuery = q.Encode()
	d, err := url.Parse(dsn)
	if err != nil {
		tb.Fatalf("dbtest: parse url: %v", err)
	}
	dq := d.Query()
	dq.Del("application_name")
	d.RawQuery = dq.Encode()
	return &TxPooler{PgBouncer: pgb, Role: role, Pooled: u.String(), Direct: d.String()}
}
