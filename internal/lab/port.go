package lab

import (
	"fmt"
	"net"
)

// FreePort is a loopback port nobody listens on when asked. Another
// process may take it before the caller binds it; the lab's servers
// (PgBouncer, scratch clusters, the daemon's HTTP) are started on it at
// once and a start that finds it taken fails and is retried by its owner.
func FreePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("lab: free port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}
