package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/syncer-dev/syncer/internal/metrics"
)

// serve starts the HTTP server and returns it with its bound address; with
// HTTPAddrOff it serves nothing and returns a nil server.
func (d *Daemon) serve(ctx context.Context) (*http.Server, string, error) {
	if d.cfg.HTTPAddr == HTTPAddrOff {
		return nil, "", nil
	}
	ln, err := net.Listen("tcp", d.cfg.HTTPAddr)
	if err != nil {
		return nil, "", fmt.Errorf("daemon: listen on %s: %w", d.cfg.HTTPAddr, err)
	}
	h := d.handler()
	if d.cfg.Console != nil {
		if err := d.console.set(ctx, d.cfg.Console, d.metrics); err != nil {
			_ = ln.Close()
			return nil, "", fmt.Errorf("daemon: console: %w", err)
		}
		h = withConsole(h, &d.console)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			d.logger.ErrorContext(ctx, "daemon: http server", slog.String("error", err.Error()))
		}
	}()
	return srv, ln.Addr().String(), nil
}

// handler routes health, readiness, metrics and, if asked, pprof.
func (d *Daemon) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		pctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		if err := d.pool.Ping(pctx); err != nil {
			http.Error(w, "database: not answering", http.StatusServiceUnavailable)
			return
		}
		if !d.riverRunning.Load() {
			http.Error(w, "job client: not running", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.Handle("GET /metrics", d.freshGauges(promhttp.HandlerFor(d.reg, promhttp.HandlerOpts{Registry: d.reg})))
	if d.cfg.Pprof {
		// No /debug/pprof/cmdline: the command line may hold a token or a
		// database password given as a flag. Index would serve it under
		// its name, so it is refused before Index sees it.
		mux.HandleFunc("/debug/pprof/cmdline", http.NotFound)
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	return mux
}

// poolStat is what the pool's series show of st.
func poolStat(st *pgxpool.Stat) metrics.PoolStat {
	return metrics.PoolStat{Max: st.MaxConns(), InUse: st.AcquiredConns(), Idle: st.IdleConns(),
		Acquires: st.AcquireCount(), Waited: st.EmptyAcquireCount(), WaitTime: st.EmptyAcquireWaitTime(), Opened: st.NewConnsCount()}
}
