// Package deploy holds what it takes to run syncer outside a developer's
// machine: Kubernetes manifests (kubernetes/), Prometheus alerts
// (prometheus/alerts.yml), a Grafana dashboard (grafana/syncer.json) and the
// files docker-compose.yml reads (compose/).
//
// It has no code of its own. Its tests keep those files honest: every alert
// and dashboard expression parses with Prometheus' own parsers and names only
// metrics syncer serves; the manifests probe the right paths on the port the
// image listens on, give the daemon more time to stop than it asks for, and
// take secrets from Secrets, never from literals; compose leaves the host's
// PostgreSQL port alone. They read files and build a metrics registry; they
// need neither a cluster, nor Docker, nor a database.
//
// It is a Go module of its own (deploy/go.mod, with the root module
// replaced by ../): Prometheus' parsers pull cloud SDKs into a module's
// graph, and the daemon's module must hold only what the daemon needs. Run
// its tests with `cd deploy && go test ./...` (make test does).
package deploy
