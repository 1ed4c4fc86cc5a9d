package cli

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/syncer-dev/syncer/internal/daemon"
)

// healthcheckTimeoutDefault bounds one healthcheck: well under the usual
// HEALTHCHECK --timeout of 30 s.
const healthcheckTimeoutDefault = 3 * time.Second

// HealthcheckCmd is `syncer healthcheck`: a distroless image has no shell
// and no curl, so the binary checks itself.
type HealthcheckCmd struct {
	HTTPAddr string        `name:"http-addr" env:"SYNCER_HTTP_ADDR" default:"${http_addr}" help:"The daemon's HTTP address, as given to syncer run (:8080 is checked on 127.0.0.1:8080)."`
	Timeout  time.Duration `name:"timeout" default:"${healthcheck_timeout}" help:"How long to wait for the answer."`
}

// Validate names a bad address.
func (c *HealthcheckCmd) Validate() error {
	if c.HTTPAddr == daemon.HTTPAddrOff {
		return usagef("%s is %q: the daemon serves no /healthz to check", setting(c, "HTTPAddr"), daemon.HTTPAddrOff)
	}
	if err := daemon.CheckHTTPAddr(c.HTTPAddr); err != nil {
		return usagef("%s: %v", setting(c, "HTTPAddr"), err)
	}
	return positive(c, "Timeout")
}

// Run exits 0 when /healthz answers 200, 1 otherwise.
func (c *HealthcheckCmd) Run(ctx context.Context, env *Env) error {
	u := "http://" + dialAddr(c.HTTPAddr) + "/healthz"
	ctx, cancel := context.WithTimeout(ctx, c.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("GET %s: %w", u, err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", u, resp.Status)
	}
	return nil
}

// dialAddr is where to reach a daemon listening on addr from the same
// machine: a listen address with no host or an unspecified one (":8080",
// "0.0.0.0:8080", "[::]:8080") is reached on loopback.
func dialAddr(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	switch ip := net.ParseIP(host); {
	case host == "":
		host = "127.0.0.1"
	case ip != nil && ip.IsUnspecified() && ip.To4() != nil:
		host = "127.0.0.1"
	case ip != nil && ip.IsUnspecified():
		host = "::1"
	}
	return net.JoinHostPort(host, port)
}
