package metrics

import "github.com/prometheus/client_golang/prometheus"

// Console's block: the web console's sign-ins (internal/console), by
// credential path: "bearer" (a script's Authorization header) or "form"
// (a person's sign-in form).

// Console holds the console's series.
type Console struct {
	// AuthFailures counts wrong tokens offered, by path.
	AuthFailures *prometheus.CounterVec
	// AuthLimited counts attempts refused with 429 because their address
	// failed too often, by path: their token was not even compared.
	AuthLimited *prometheus.CounterVec
}

func newConsole(reg prometheus.Registerer) Console {
	c := Console{
		AuthFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "syncer_console_auth_failures_total", Help: "Wrong tokens offered to the web console, by path (bearer, form).",
		}, []string{"path"}),
		AuthLimited: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "syncer_console_auth_limited_total", Help: "Console sign-ins refused with 429, unchecked, because their client address failed too often, by path (bearer, form).",
		}, []string{"path"}),
	}
	// Both paths exist from the start, so a rate over them is 0, not
	// absent, until the first guess.
	for _, p := range []string{"bearer", "form"} {
		c.AuthFailures.WithLabelValues(p)
		c.AuthLimited.WithLabelValues(p)
	}
	reg.MustRegister(c.AuthFailures, c.AuthLimited)
	return c
}

// ConsoleAuthFailed counts a wrong token offered on path.
func (m *Metrics) ConsoleAuthFailed(path string) {
	if m == nil {
		return
	}
	m.Console.AuthFailures.WithLabelValues(path).Inc()
}

// ConsoleAuthLimited counts an attempt on path refused because its
// address is limited.
func (m *Metrics) ConsoleAuthLimited(path string) {
	if m == nil {
		return
	}
	m.Console.AuthLimited.WithLabelValues(path).Inc()
}
