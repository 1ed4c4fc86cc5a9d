package bench

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/syncer-dev/syncer/internal/lab/fakethirdparty"
)

// fake is the third party, served by this process on a loopback port.
type fake struct {
	*fakethirdparty.Server
	url   string
	srv   *http.Server
	doors []*http.Server // more ports onto the same fake (startTappedFake)
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
	f := &fake{Server: fakethirdparty.New(cfg)}
	var err error
	if f.srv, f.url, err = serveOn(f.Server); err != nil {
		return nil, err
	}
	return f, nil
}

// serveOn serves h on a loopback port of its own and returns its URL.
func serveOn(h http.Handler) (*http.Server, string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, "", fmt.Errorf("bench: listen for the fake third party: %w", err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	return srv, "http://" + ln.Addr().String(), nil
}

func (f *fake) close() {
	f.Server.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	for _, srv := range append([]*http.Server{f.srv}, f.doors...) {
		if srv != nil {
			_ = srv.Shutdown(ctx)
		}
	}
}
