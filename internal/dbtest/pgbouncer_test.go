package dbtest

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

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
