package database_test

import (
	"context"
	"fmt"
	"net"
	"syscall"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/database"
)

func TestNotYetOnlyForAServerThatIsThere(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		err  error
		wait bool
	}{
		{"starting up or shutting down", &pgconn.PgError{Code: "57P03"}, true},
		{"ended by a restart", &pgconn.PgError{Code: "57P01"}, true},
		{"a pooler's server connection lost", &pgconn.PgError{Code: "08P01"}, true},
		{"too many connections", &pgconn.PgError{Code: "53300"}, true},
		{"connection exception", &pgconn.PgError{Code: "08006"}, true},
		{"no answer in time", fmt.Errorf("database: cannot connect: %w", context.DeadlineExceeded), true},
		{"dropped by a restart", &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}, true},
		{"authentication", &pgconn.PgError{Code: "28P01"}, false},
		{"no such database", &pgconn.PgError{Code: "3D000"}, false},
		{"nothing listening", &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}, false},
		{"not migrated", fmt.Errorf("run syncer migrate"), false},
	} {
		require.Equal(t, tt.wait, database.NotYet(fmt.Errorf("wrapped: %w", tt.err)), tt.name)
	}
}
