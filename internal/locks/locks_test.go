package locks_test

import (
	"context"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/dbtest"
	"github.com/syncer-dev/syncer/internal/locks"
)

const checkInterval = 100 * time.Millisecond

type testBundle struct {
	dsn        string
	schema     string
	connConfig *pgx.ConnConfig
	pool       *pgxpool.Pool
	locker     *locks.Locker
	key        int64
}

// setup gives a test its own schema, a pool on it, a Locker checking every
// checkInterval (unless cfg says otherwise) and a key no other test uses:
// advisory locks are per database, not per schema.
func setup(t *testing.T, cfg *locks.Config) *testBundle {
	t.Helper()
	dsn, schema := dbtest.NewSchema(t)
	connConfig, err := pgx.ParseConfig(dsn)
	require.NoError(t, err)
	pool, err := pgxpool.New(context.Background(), dsn)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	if cfg == nil {
		cfg = &locks.Config{CheckInterval: checkInterval}
	}
	locker, err := locks.New(connConfig, cfg)
	require.NoError(t, err)
	t.Cleanup(locker.Close)
	_, err = pool.Exec(context.Background(), "CREATE TABLE marks (id int PRIMARY KEY)")
	require.NoError(t, err)
	return &testBundle{
		dsn:        dsn,
		schema:     schema,
		connConfig: connConfig,
		pool:       pool,
		locker:     locker,
		key:        locks.Key(schema, t.Name()),
	}
}

// newLocker returns another Locker on the same database, as a second daemon
// would have.
func (b *testBundle) newLocker(t *testing.T) *locks.Locker {
	t.Helper()
	locker, err := locks.New(b.connConfig, &locks.Config{CheckInterval: checkInterval})
	require.NoError(t, err)
	t.Cleanup(locker.Close)
	return locker
}

func (b *testBundle) tryAcquire(t *testing.T, locker *locks.Locker) *locks.Lock {
	t.Helper()
	lk, err := locker.TryAcquire(context.Background(), b.key)
	require.NoError(t, err)
	t.Cleanup(func() { _ = lk.Release(context.Background()) })
	return lk
}

func (b *testBundle) terminate(t *testing.T, pid int) {
	t.Helper()
	var ok bool
	// Waits for the backend to exit: its locks are free then.
	require.NoError(t, b.pool.QueryRow(context.Background(), "SELECT pg_terminate_backend($1, 5000)", pid).Scan(&ok))
	require.True(t, ok)
}

func (b *testBundle) markCount(t *testing.T) int {
	t.Helper()
	var n int
	require.NoError(t, b.pool.QueryRow(context.Background(), "SELECT count(*) FROM marks").Scan(&n))
	return n
}

func insertMark(id int) func(pgx.Tx) error {
	return func(tx pgx.Tx) error {
		_, err := tx.Exec(context.Background(), "INSERT INTO marks (id) VALUES ($1)", id)
		return err
	}
}

func waitDone(t *testing.T, lk *locks.Lock, within time.Duration) {
	t.Helper()
	select {
	case <-lk.Done():
	case <-time.After(within):
		t.Fatalf("lock not reported lost within %s", within)
	}
}

func TestKey(t *testing.T) {
	t.Parallel()
	// printf 'syncer\0sync' | sha256sum -> ba6af40444a8d052..., as int64.
	require.Equal(t, int64(-5013926935954665390), locks.Key("syncer", "sync"))
	require.NotEqual(t, locks.Key("syncer", "sync"), locks.Key("syncers", "ync"), "the separator keeps namespace and name apart")
}

func TestKeyMatchesSQLFormula(t *testing.T) {
	t.Parallel()
	pool := dbtest.NewPool(t)
	for _, tt := range []struct{ namespace, name string }{
		{"syncer", "sync"},
		{"", ""},
		{"ns", "ünïcode name"},
	} {
		var got int64
		err := pool.QueryRow(context.Background(), `SELECT ('x' || encode(substring(sha256(
			convert_to($1, 'UTF8') || '\x00'::bytea || convert_to($2, 'UTF8'))
			FROM 1 FOR 8), 'hex'))::bit(64)::bigint`, tt.namespace, tt.name).Scan(&got)
		require.NoError(t, err)
		require.Equal(t, locks.Key(tt.namespace, tt.name), got, "%q %q", tt.namespace, tt.name)
	}
}

func TestNewValidates(t *testing.T) {
	t.Parallel()
	connConfig, err := pgx.ParseConfig(dbtest.URL())
	require.NoError(t, err)
	for _, tt := range []struct {
		name       string
		connConfig *pgx.ConnConfig
		cfg        *locks.Config
		wantErr    string
	}{
		{"nil config is fine", connConfig, nil, ""},
		{"no conn config", nil, nil, "connConfig"},
		{"negative interval", connConfig, &locks.Config{CheckInterval: -1}, "CheckInterval"},
		{"negative timeout", connConfig, &locks.Config{CheckTimeout: -1}, "CheckTimeout"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := locks.New(tt.connConfig, tt.cfg)
			if tt.wantErr == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tt.wantErr)
		})
	}
}

func TestTryAcquire(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := context.Background()
	other := b.newLocker(t)

	lk := b.tryAcquire(t, b.locker)
	require.Equal(t, b.key, lk.Key())
	require.NoError(t, lk.Err())

	start := time.Now()
	_, err := other.TryAcquire(ctx, b.key)
	require.ErrorIs(t, err, locks.ErrLockBusy)
	require.Less(t, time.Since(start), 2*time.Second, "a busy try returns at once")

	h, held, err := locks.HolderOf(ctx, b.pool, b.key)
	require.NoError(t, err)
	require.True(t, held)
	require.Equal(t, lk.PID(), h.PID)
	require.Equal(t, b.schema, h.ApplicationName)

	require.NoError(t, lk.Release(ctx))
	_, held, err = locks.HolderOf(ctx, b.pool, b.key)
	require.NoError(t, err)
	require.False(t, held, "release unlocks before returning")

	lk2 := b.tryAcquire(t, other)
	require.NoError(t, lk2.Release(ctx))
}

func TestHolderNegativeAndPositiveKeys(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := context.Background()
	// Both halves of the key with the high bit set and clear, so the
	// classid/objid mapping is tested as unsigned.
	for _, key := range []int64{b.key | -1<<63 | 1<<31, (b.key &^ (-1 << 63)) &^ (1 << 31)} {
		lk, err := b.locker.TryAcquire(ctx, key)
		require.NoError(t, err)
		h, held, err := locks.HolderOf(ctx, b.pool, key)
		require.NoError(t, err)
		require.True(t, held)
		require.Equal(t, lk.PID(), h.PID)
		// The self-check uses the same mapping: the lock must survive it.
		time.Sleep(3 * checkInterval)
		require.NoError(t, lk.Err())
		require.NoError(t, lk.Release(ctx))
	}
}

func TestSessionSettings(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := context.Background()
	lk := b.tryAcquire(t, b.locker)

	_ = lk
	_ = ctx
	got, err := locks.HolderSettings(b.locker, "tcp_keepalives_idle", "tcp_keepalives_interval", "tcp_keepalives_count",
		"idle_in_transaction_session_timeout", "application_name", "search_path")
	require.NoError(t, err)
	require.Equal(t, map[string]string{
		"tcp_keepalives_idle":                 "10",
		"tcp_keepalives_interval":             "5",
		"tcp_keepalives_count":                "3",
		"idle_in_transaction_session_timeout": "0",
		"application_name":                    b.schema, // kept from the config
		"search_path":                         b.schema,
	}, got)
}

func TestNoOverlapAcrossProcesses(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := context.Background()
	_, err := b.pool.Exec(ctx, `
		CREATE TABLE inside (n int NOT NULL);
		INSERT INTO inside VALUES (0);
		CREATE TABLE entries (pid int NOT NULL, what text NOT NULL);
		CREATE TABLE violations (pid int NOT NULL, n int NOT NULL)`)
	require.NoError(t, err)

	const children, rounds = 4, 10
	cmds := make([]*exec.Cmd, children)
	outs := make([]*dbtest.Buffer, children)
	for i := range cmds {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(),
			envHelper+"=overlap",
			envDSN+"="+b.dsn,
			envKey+"="+strconv.FormatInt(b.key, 10),
			envRounds+"="+strconv.Itoa(rounds),
		)
		outs[i] = &dbtest.Buffer{}
		cmd.Stdout, cmd.Stderr = outs[i], outs[i]
		require.NoError(t, cmd.Start())
		cmds[i] = cmd
	}
	for i, cmd := range cmds {
		require.NoError(t, cmd.Wait(), "child %d output:\n%s", i, outs[i].String())
	}

	var nViolations, nEntries, nPids, inside int
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT count(*) FROM violations").Scan(&nViolations))
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT count(*), count(DISTINCT pid) FROM entries").Scan(&nEntries, &nPids))
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT n FROM inside").Scan(&inside))
	require.Equal(t, 0, nViolations, "some child saw another inside the critical section")
	require.Equal(t, children*rounds, nEntries)
	require.Equal(t, children, nPids)
	require.Equal(t, 0, inside)
}

// Every lock of a Locker is held by one session, whatever their number,
// and busy tries open none (issue 58).
func TestEveryLockOnOneSession(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := context.Background()
	lk := b.tryAcquire(t, b.locker)

	// The other daemon's sessions get their own name, to be counted.
	name := b.schema + "-one"
	cc := b.connConfig.Copy()
	cc.RuntimeParams["application_name"] = name
	other, err := locks.New(cc, &locks.Config{CheckInterval: checkInterval})
	require.NoError(t, err)
	t.Cleanup(other.Close)
	sessions := func() map[int]bool {
		rows, err := b.pool.Query(ctx, `SELECT pid FROM pg_stat_activity WHERE application_name = $1`, name)
		require.NoError(t, err)
		pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
		require.NoError(t, err)
		out := map[int]bool{}
		for _, p := range pids {
			out[int(p)] = true
		}
		return out
	}

	for range 50 {
		_, err := other.TryAcquire(ctx, b.key)
		require.ErrorIs(t, err, locks.ErrLockBusy)
	}
	require.Len(t, sessions(), 1, "busy tries on the holder session")

	var held []*locks.Lock
	for i := range 20 {
		lk, err := other.TryAcquire(ctx, b.key+1+int64(i))
		require.NoError(t, err)
		held = append(held, lk)
	}
	_, err = other.TryAcquire(ctx, b.key+1)
	require.ErrorIs(t, err, locks.ErrLockBusy, "a key this Locker holds is busy for it")
	for _, h := range held {
		require.Equal(t, held[0].PID(), h.PID())
		require.NoError(t, h.WithTx(ctx, func(pgx.Tx) error { return nil }))
	}
	require.True(t, sessions()[held[0].PID()])
	time.Sleep(3 * checkInterval)
	for _, h := range held {
		require.NoError(t, h.Err(), "the self-check of all locks at once keeps them")
		require.NoError(t, h.Release(ctx))
	}

	// Once free, the holder session takes the lock; a dead holder session
	// is replaced, not reported.
	require.NoError(t, lk.Release(ctx))
	lk2, err := other.TryAcquire(ctx, b.key)
	require.NoError(t, err)
	pid := lk2.PID()
	require.Equal(t, held[0].PID(), pid)
	require.NoError(t, lk2.Release(ctx))
	b.terminate(t, pid)
	lk3, err := other.TryAcquire(ctx, b.key)
	require.NoError(t, err)
	require.NotEqual(t, pid, lk3.PID())
	require.NoError(t, lk3.Release(ctx))
}

// A lock whose former holder's transaction still runs is not granted
// until it ends, whatever happened to the holder session (the fence).
func TestLockNotGrantedWhileFormerHoldersTransactionRuns(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := context.Background()
	lk := b.tryAcquire(t, b.locker)
	inside, release := make(chan struct{}), make(chan struct{})
	txErr := make(chan error, 1)
	go func() {
		txErr <- lk.WithTx(ctx, func(tx pgx.Tx) error {
			close(inside)
			<-release
			return insertMark(1)(tx)
		})
	}()
	<-inside
	b.terminate(t, lk.PID())
	other := b.newLocker(t)
	for range 5 {
		_, err := other.TryAcquire(ctx, b.key)
		require.ErrorIs(t, err, locks.ErrLockBusy, "the former holder's transaction runs")
		time.Sleep(50 * time.Millisecond)
	}
	close(release)
	require.ErrorIs(t, <-txErr, locks.ErrLockLost, "its last check finds the holder session gone")
	require.Equal(t, 0, b.markCount(t))
	lk2, err := other.TryAcquire(ctx, b.key)
	require.NoError(t, err)
	require.NoError(t, lk2.Release(ctx))
}

func TestHolderNamesHostAndProcess(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := context.Background()
	cc := b.connConfig.Copy()
	cc.RuntimeParams["application_name"] = "syncer run web-3.example:4711"
	locker, err := locks.New(cc, nil)
	require.NoError(t, err)
	t.Cleanup(locker.Close)
	lk, err := locker.TryAcquire(ctx, b.key)
	require.NoError(t, err)
	defer func() { require.NoError(t, lk.Release(ctx)) }()

	h, held, err := locks.HolderOf(ctx, b.pool, b.key)
	require.NoError(t, err)
	require.True(t, held)
	require.Equal(t, locks.Holder{
		PID: lk.PID(), ApplicationName: "syncer run web-3.example:4711", ClientAddr: h.ClientAddr,
		Role: "syncer run", Host: "web-3.example", Process: 4711,
	}, h)
	ok, err := locks.Held(ctx, b.pool, b.key)
	require.NoError(t, err)
	require.True(t, ok)
}

func TestKeysOfSyncer(t *testing.T) {
	t.Parallel()
	require.Equal(t, locks.Key("syncer", "export:s"), locks.ExportKey("s", "resources"))
	require.Equal(t, locks.Key("syncer", "relay:s"), locks.RelayKey("s"))
	require.NotEqual(t, locks.ExportKey("a", "resources"), locks.ExportKey("b", "resources"))
	require.Equal(t, locks.Key("syncer", "export:s:source:orders"), locks.ExportKey("s", "orders"))
	require.NotEqual(t, locks.ExportKey("s", "a"), locks.ExportKey("s", "b"))
	require.Equal(t, "syncermg", string([]byte{0x73, 0x79, 0x6e, 0x63, 0x65, 0x72, 0x6d, 0x67}))
	require.Equal(t, int64(0x73796e6365726d67), locks.MigrateKey)
}
