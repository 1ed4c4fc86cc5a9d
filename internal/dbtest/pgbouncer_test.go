package dbtest

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// A port taken between freeLoopbackPort and PgBouncer's bind (another
// test's listener, here one that resets every connection) is never taken
// for the PgBouncer: TCP accepts there, but PgBouncer exited. The helper
// used to return it as ready, and the test then met a reset.
func TestPgBouncerOnATakenPortIsNotReady(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			if tc, ok := c.(*net.TCPConn); ok {
				_ = tc.SetLinger(0) // a reset, not a clean close
			}
			_ = c.Close()
		}
	}()
	bin, dir, host, port := prepare(t, nil)
	p, log := startOn(t, bin, dir, host, port, "transaction", ln.Addr().String())
	if p != nil {
		t.Fatalf("a PgBouncer that could not bind %s was returned as ready", ln.Addr())
	}
	if log == "" {
		t.Fatal("no log of the PgBouncer that could not bind")
	}
}

// StartPgBouncer returns a pooler that answers a query at once, in every
// pool mode.
func TestStartPgBouncerAnswers(t *testing.T) {
	for _, mode := range []string{"session", "transaction"} {
		p := StartPgBouncer(t, mode)
		cc, err := pgx.ParseConfig(p.URL(t, URL()))
		if err != nil {
			t.Fatal(err)
		}
		cc.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		conn, err := pgx.ConnectConfig(ctx, cc)
		if err != nil {
			cancel()
			t.Fatalf("%s: %v\n%s", mode, err, p.Log())
		}
		var one int
		err = conn.QueryRow(ctx, "SELECT 1").Scan(&one)
		_ = conn.Close(ctx)
		cancel()
		if err != nil || one != 1 {
			t.Fatalf("%s: %v\n%s", mode, err, p.Log())
		}
	}
}
