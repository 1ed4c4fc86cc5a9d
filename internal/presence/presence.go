// Package presence says which daemons are running and which generation of
// each destination's hold (a person's pause or resume) each of them holds,
// so that `syncer pause` returns only once the pause holds everywhere.
//
// Guarantees: a daemon writes a generation here only after its deliverer
// refuses every request that generation's hold forbids (delivery's
// AdoptHold), so once Await returns with no daemon missing, no daemon
// alive starts a request the hold forbids: a row written after that is
// not sent while the destination stays paused. A daemon that stopped
// saying it is alive is not waited for past its lease; one that started
// since reads the hold before its first request. The package owns
// syncer_daemons (migration 019) and every statement on it.
package presence

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/syncer-dev/syncer/internal/database"
)

// Beat is how often a running daemon reads the holds and says which it
// holds.
const Beat = 500 * time.Millisecond

// Lease is how long a daemon counts as running after it last said so.
const Lease = 5 * time.Second

// AwaitDefault bounds how long `syncer pause` and the console wait for
// every daemon to hold a pause.
const AwaitDefault = 10 * time.Second

// forgetAfter is how long the rows of a daemon that stopped without
// leaving (kill -9) are kept, for nothing but a reader's curiosity.
const forgetAfter = time.Hour

// NewID names this process among the daemons: host, pid and a random
// suffix (pids are reused, and containers share them).
func NewID() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown"
	}
	var b [3]byte
	_, _ = rand.Read(b[:])
	return host + ":" + strconv.Itoa(os.Getpid()) + ":" + hex.EncodeToString(b[:])
}

// Say records that daemon is alive for Lease and holds, per destination,
// the generation given; a destination it no longer has is dropped. It
// also forgets daemons long gone.
func Say(ctx context.Context, q database.Querier, daemon string, held map[string]int64) error {
	names := make([]string, 0, len(held))
	gens := make([]int64, 0, len(held))
	for n, g := range held {
		names, gens = append(names, n), append(gens, g)
	}
	_, err := q.Exec(ctx, `WITH gone AS (
			DELETE FROM syncer_daemons d
			WHERE (d.daemon = $1 AND d.destination <> ALL ($2::text[]))
				OR d.seen_until < now() - $5::float8 * interval '1 second'
		)
		INSERT INTO syncer_daemons (daemon, destination, generation, seen_until)
		SELECT $1, a.destination, a.generation, now() + $4::float8 * interval '1 second'
		FROM unnest($2::text[], $3::bigint[]) AS a (destination, generation)
		ON CONFLICT (daemon, destination) DO UPDATE
			SET generation = EXCLUDED.generation, seen_until = EXCLUDED.seen_until`,
		daemon, names, gens, Lease.Seconds(), forgetAfter.Seconds())
	if err != nil {
		return fmt.Errorf("presence: say %s holds: %w", daemon, err)
	}
	return nil
}

// Leave removes daemon: it stopped and sends nothing more.
func Leave(ctx context.Context, q database.Querier, daemon string) error {
	if _, err := q.Exec(ctx, `DELETE FROM syncer_daemons WHERE daemon = $1`, daemon); err != nil {
		return fmt.Errorf("presence: leave %s: %w", daemon, err)
	}
	return nil
}

// Missing returns the daemons alive that serve destination and do not yet
// hold generation gen, by name.
func Missing(ctx context.Context, q database.Querier, destination string, gen int64) ([]string, error) {
	rows, err := q.Query(ctx, `SELECT daemon FROM syncer_daemons
		WHERE destination = $1 AND generation < $2 AND seen_until > now() ORDER BY daemon`, destination, gen)
	if err != nil {
		return nil, fmt.Errorf("presence: read daemons: %w", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("presence: read daemons: %w", err)
	}
	return out, nil
}

// Within is the bound Await waits for when asked to wait within:
// AwaitDefault when 0 or less. It is the one place the default is
// applied; those that name the bound (an error, a flag) ask it too.
func Within(within time.Duration) time.Duration {
	if within <= 0 {
		return AwaitDefault
	}
	return within
}

// Await waits until every daemon alive that serves destination holds
// generation gen, for at most within (AwaitDefault when 0), and returns
// those that still did not, by name: empty when it holds everywhere.
func Await(ctx context.Context, q database.Querier, destination string, gen int64, within time.Duration) ([]string, error) {
	deadline := time.Now().Add(Within(within))
	const every = 50 * time.Millisecond
	for {
		missing, err := Missing(ctx, q, destination, gen)
		if err != nil || len(missing) == 0 || time.Now().Add(every).After(deadline) {
			return missing, err
		}
		t := time.NewTimer(every)
		select {
		case <-ctx.Done():
			t.Stop()
			return missing, ctx.Err()
		case <-t.C:
		}
	}
}
