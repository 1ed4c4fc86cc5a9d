package locks

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// The statement that opens each of a pipe's transactions: the lock's
// check and the token that chains a transaction to the one before, so
// that none commits after one before it failed.

// pipeHeadSQL opens every transaction on a pipe: it fails, aborting the
// transaction, unless it takes the lock's fence ($3) shared and the holder
// session (server pid $4) holds the lock ($1, $2) (fenceSQL) and, when $5
// is not null, the transaction before set the token $5; then it sets its
// own token $6, which stays only if this transaction commits (a setting
// changed in an aborted transaction reverts).
const pipeHeadSQL = `SELECT (CASE
	WHEN NOT pg_try_advisory_xact_lock_shared($3) THEN '` + notHeldText + `'
	WHEN NOT EXISTS (SELECT 1 FROM pg_locks WHERE ` + holderHeldWhere + `) THEN '` + notHeldText + `'
	WHEN $5::text IS NOT NULL AND current_setting('syncer.pipe_token', true) IS DISTINCT FROM $5::text THEN '` + notFencedText + `'
	ELSE left(set_config('syncer.pipe_token', $6::text, false), 0) || '1' END)::int`

// pipeChainSQL opens a transaction sent with SendChained: pipeHeadSQL
// without the lock's check; $1 is the token the transaction before set,
// $2 this one's.
const pipeChainSQL = `SELECT (CASE
	WHEN $1::text IS NOT NULL AND current_setting('syncer.pipe_token', true) IS DISTINCT FROM $1::text THEN '` + notFencedText + `'
	ELSE left(set_config('syncer.pipe_token', $2::text, false), 0) || '1' END)::int`

const notFencedText = "syncer: the transaction sent before this one did not commit"

func isNotFenced(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "22P02" && strings.Contains(pgErr.Message, notFencedText)
}

func newToken() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
