package breakerstore

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// KeyAccount holds a tenant's Account: a fingerprint of the account its
// connection row sends it to, so that a change of account is told once,
// by one daemon, whatever restarts between (contract section 10.1, "A
// new account gets everything"). Only a tenant's namespace has it, and
// the tenant's state is not told from it.
const KeyAccount = "account"

// Account is the fingerprint of a tenant's account (a digest of its url
// and account column, never of a secret) as last seen, and since when.
type Account struct {
	Fingerprint string    `json:"fingerprint"`
	Since       time.Time `json:"since"`
}

// LockAccount reads the tenant's Account in namespace and locks it until
// tx ends, so that of two daemons that see the same change, the second
// reads what the first wrote. known is false when none is recorded. The
// key is made (empty) when missing, for the lock: tx's rollback drops it.
func LockAccount(ctx context.Context, tx pgx.Tx, namespace string) (a Account, known bool, err error) {
	key := keyPrefix(namespace) + KeyAccount
	if _, err := tx.Exec(ctx, `INSERT INTO syncer_state (key, value, updated_at) VALUES ($1, 'null', now()) ON CONFLICT (key) DO NOTHING`, key); err != nil {
		return a, false, fmt.Errorf("breakerstore: lock %s: %w", KeyAccount, err)
	}
	var data []byte
	if err := tx.QueryRow(ctx, `SELECT value FROM syncer_state WHERE key = $1 FOR UPDATE`, key).Scan(&data); err != nil {
		return a, false, fmt.Errorf("breakerstore: lock %s: %w", KeyAccount, err)
	}
	decode(data, &a)
	return a, a.Fingerprint != "", nil
}

// SetAccount records the tenant's Account in namespace, in tx (after
// LockAccount); Since is set to now when zero.
func SetAccount(ctx context.Context, tx pgx.Tx, namespace string, a Account) error {
	if a.Since.IsZero() {
		a.Since = time.Now().UTC()
	}
	data, err := json.Marshal(a)
	if err != nil {
		return fmt.Errorf("breakerstore: set %s: %w", KeyAccount, err)
	}
	if _, err := tx.Exec(ctx, `UPDATE syncer_state SET value = $2, updated_at = now() WHERE key = $1`, keyPrefix(namespace)+KeyAccount, data); err != nil {
		return fmt.Errorf("breakerstore: set %s: %w", KeyAccount, err)
	}
	return nil
}
