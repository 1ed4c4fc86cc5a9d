package bench

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/syncer-dev/syncer/internal/fakethirdparty"
)

// fake is the third party, served by this process on a loopback port.
type fake struct {
	*fakethirdparty.Server
	url string
	srv *http.Server
}

// startFake starts a well-behaved fake third party sized for items items
// (fakethirdparty.Config.ExpectedItems): it shares the machine with the
// daemon it measures, and regrowing its records as a drain goes on took
// CPU from the drain.
func startFake(items int) (*fake, error) {
	return startFakeWith(fakethirdparty.Config{ExpectedItems: items})
}

// startFakeWith starts a fake third party with the knobs of cfg.
func startFakeWith(cfg fakethirdparty.Config) (*fake, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("bench: listen for the fake third party: %w", err)
	}
	f := &fake{Server: fakethirdparty.New(cfg)}
	f.srv = &http.Server{Handler: f.Server, ReadHeaderTimeout: 5 * time.Second}
	f.url = "http://" + ln.Addr().String()
	go func() { _ = f.srv.Serve(ln) }()
	return f, nil
}

func (f *fake) close() {
	f.Server.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = f.srv.Shutdown(ctx)
}
