package database

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"syscall"

	"github.com/jackc/pgx/v5/pgconn"
)

// NotYet reports whether err says the server is there but cannot serve
// now: it is starting up or shutting down (a restart), ended the session
// (57P01, a restart or pg_terminate_backend; 57P02, a crash), has no
// connection to spare, or accepted the connection and did not answer in
// time, or dropped it (a reset, a pooler's lost server connection,
// 08P01). Another try, after a wait, may succeed. Nothing listening (a
// refused connection) and the server's other refusals are final, so a
// wrong address still fails at once; a caller that has reached the server
// before may count a refusal as a restart too.
func NotYet(err error) bool {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		// 08: connection exceptions; 57P01-57P03: the session ended by a
		// shutdown or the server starting up or shutting down; 53300: too
		// many connections.
		return strings.HasPrefix(pe.Code, "08") || pe.Code == "57P01" || pe.Code == "57P02" || pe.Code == "57P03" || pe.Code == "53300"
	}
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || pgconn.Timeout(err) || (errors.As(err, &ne) && ne.Timeout()) ||
		// The server took the connection and dropped it: a restart.
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, io.ErrUnexpectedEOF)
}
