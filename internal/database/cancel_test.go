package database_test

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/database"
	"github.com/syncer-dev/syncer/internal/dbtest"
)

// cancelCounter is a TCP proxy to PostgreSQL that counts the connections
// opening with a CancelRequest (length 16, code 80877102).
type cancelCounter struct {
	ln      net.Listener
	target  string
	cancels atomic.Int64
	wg      sync.WaitGroup
}

func startCancelCounter(t *testing.T, target string) *cancelCounter {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &cancelCounter{ln: ln, target: target}
	p.wg.Go(p.serve)
	t.Cleanup(func() {
		_ = ln.Close()
		p.wg.Wait()
	})
	return p
}

func (p *cancelCounter) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.wg.Go(func() { p.pipe(c) })
	}
}

func (p *cancelCounter) pipe(c net.Conn) {
	defer c.Close()
	var head [8]byte
	if _, err := io.ReadFull(c, head[:]); err != nil {
		return
	}
	if binary.BigEndian.Uint32(head[:4]) == 16 && binary.BigEndian.Uint32(head[4:]) == 80877102 {
		p.cancels.Add(1)
	}
	s, err := net.Dial("tcp", p.target)
	if err != nil {
		return
	}
	defer s.Close()
	if _, err := s.Write(head[:]); err != nil {
		return
	}
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(s, c); done <- struct{}{} }()
	go func() { _, _ = io.Copy(c, s); done <- struct{}{} }()
	<-done
}

// A statement whose context is cancelled ends its connection; no cancel
// request goes out, which a pooler in between may not survive (PgBouncer
// 1.18 exited after one of syncer's).
func TestCancelledContextSendsNoCancelRequest(t *testing.T) {
	t.Parallel()
	dsn, _ := dbtest.NewSchema(t)
	u, err := url.Parse(dsn)
	require.NoError(t, err)
	proxy := startCancelCounter(t, u.Host)
	u.Host = proxy.ln.Addr().String()
	q := u.Query()
	q.Set("sslmode", "disable")
	u.RawQuery = q.Encode()

	ctx := context.Background()
	pool, err := database.Open(ctx, u.String(), "syncer test")
	require.NoError(t, err)
	defer pool.Close()

	for range 3 {
		qctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		_, err = pool.Exec(qctx, "SELECT pg_sleep(5)")
		cancel()
		require.Error(t, err)
		require.True(t, errors.Is(err, context.DeadlineExceeded) || qctx.Err() != nil, "%v", err)
	}
	// A cancel request is sent asynchronously: give it the time to arrive.
	time.Sleep(500 * time.Millisecond)
	require.Zero(t, proxy.cancels.Load(), "cancel requests sent")

	var one int
	require.NoError(t, pool.QueryRow(ctx, "SELECT 1").Scan(&one), "the pool opens another connection")
}
