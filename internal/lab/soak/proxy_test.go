package soak

import (
	"bufio"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The proxy carries bytes, holds them while black-holed (the connection
// stays open, as behind a dead route) and cuts every connection on reset.
func TestProxyBlackholesAndResets(t *testing.T) {
	t.Parallel()
	echo, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { echo.Close() })
	go func() {
		for {
			c, err := echo.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				s := bufio.NewScanner(c)
				for s.Scan() {
					_, _ = c.Write(append(s.Bytes(), '\n'))
				}
			}()
		}
	}()
	p, err := newProxy(echo.Addr().String())
	require.NoError(t, err)
	t.Cleanup(p.close)
	c, err := net.Dial("tcp", p.ln.Addr().String())
	require.NoError(t, err)
	defer c.Close()
	r := bufio.NewReader(c)
	roundTrip := func(within time.Duration) error {
		_ = c.SetDeadline(time.Now().Add(within))
		if _, err := c.Write([]byte("ping\n")); err != nil {
			return err
		}
		_, err := r.ReadString('\n')
		return err
	}
	require.NoError(t, roundTrip(time.Second))
	p.blackhole(500 * time.Millisecond)
	require.Error(t, roundTrip(200*time.Millisecond), "nothing comes back while black-holed")
	time.Sleep(600 * time.Millisecond)
	_ = c.SetDeadline(time.Now().Add(time.Second))
	line, err := r.ReadString('\n')
	require.NoError(t, err, "held bytes flow once the route is back")
	require.Equal(t, "ping\n", line)
	p.reset()
	require.Error(t, roundTrip(time.Second), "a reset connection is gone")
}
