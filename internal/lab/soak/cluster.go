package soak

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"time"

	"github.com/syncer-dev/syncer/internal/lab"
)

// cluster is a PostgreSQL server of the soak's own: initdb'd into a
// scratch directory, on a port of its own. The soak restarts it as a fault,
// which it must never do to a server anybody else uses.
type cluster struct {
	bin  string // the server's bin directory
	dir  string // the data directory
	port int
	as   string // the OS user that runs it, when the soak runs as root
	log  string
}

// clusterBinDir finds the newest PostgreSQL server installed the Debian way,
// or the one pg_config names.
func clusterBinDir(want string) (string, error) {
	if want != "" {
		return want, nil
	}
	if dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin"); len(dirs) > 0 {
		sort.Slice(dirs, func(i, j int) bool {
			vi, _ := strconv.Atoi(filepath.Base(filepath.Dir(dirs[i])))
			vj, _ := strconv.Atoi(filepath.Base(filepath.Dir(dirs[j])))
			return vi > vj
		})
		return dirs[0], nil
	}
	if out, err := exec.Command("pg_config", "--bindir").Output(); err == nil {
		return string(out[:len(out)-1]), nil
	}
	return "", errors.New("soak: no PostgreSQL server found (set --pg-bin to its bin directory)")
}

// startCluster initdb's a cluster under dir and starts it on a free port.
func startCluster(ctx context.Context, binDir, dir string) (*cluster, error) {
	port, err := lab.FreePort()
	if err != nil {
		return nil, err
	}
	c := &cluster{bin: binDir, dir: filepath.Join(dir, "pgdata"), port: port, log: filepath.Join(dir, "postgres.log")}
	if os.Geteuid() == 0 {
		// initdb refuses to run as root: the cluster belongs to postgres.
		if _, err := user.Lookup("postgres"); err != nil {
			return nil, errors.New("soak: running as root needs an OS user postgres to own the scratch cluster")
		}
		c.as = "postgres"
		if err := os.Chmod(dir, 0o777); err != nil {
			return nil, err
		}
	}
	if out, err := c.command(ctx, "initdb", "-D", c.dir, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync").CombinedOutput(); err != nil {
		return nil, fmt.Errorf("soak: initdb: %w: %s", err, out)
	}
	if err := c.start(ctx); err != nil {
		return nil, err
	}
	return c, nil
}

func (c *cluster) command(ctx context.Context, tool string, args ...string) *exec.Cmd {
	path := filepath.Join(c.bin, tool)
	if c.as != "" {
		return exec.CommandContext(ctx, "runuser", append([]string{"-u", c.as, "--", path}, args...)...)
	}
	return exec.CommandContext(ctx, path, args...)
}

// start starts the server and waits until it accepts connections. A
// commit must survive the server's crash (the restart fault stops it
// immediate), so synchronous_commit stays on: off, a crash loses commits
// already acknowledged, marks of rows the third party accepted among
// them, and every check after it reads a database that went back in time
// (seed 1125's first run). fsync is off: the machine does not crash, only
// the server, and the OS keeps what it was handed.
func (c *cluster) start(ctx context.Context) error {
	opts := fmt.Sprintf("-p %d -c listen_addresses=127.0.0.1 -c unix_socket_directories='' -c fsync=off "+
		"-c full_page_writes=off -c max_connections=200 -c shared_buffers=128MB", c.port)
	out, err := c.command(ctx, "pg_ctl", "-D", c.dir, "-l", c.log, "-w", "-t", "60", "-o", opts, "start").CombinedOutput()
	if err != nil {
		return fmt.Errorf("soak: start PostgreSQL: %w: %s", err, out)
	}
	return nil
}

// restart stops the server the way a crash or a failover does (immediate:
// every session is cut, nothing is flushed politely) and starts it again.
func (c *cluster) restart(ctx context.Context) error {
	if out, err := c.command(ctx, "pg_ctl", "-D", c.dir, "-m", "immediate", "-w", "stop").CombinedOutput(); err != nil {
		return fmt.Errorf("soak: stop PostgreSQL: %w: %s", err, out)
	}
	return c.start(ctx)
}

// stop stops the server; the caller removes its directory.
func (c *cluster) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_ = c.command(ctx, "pg_ctl", "-D", c.dir, "-m", "fast", "-w", "stop").Run()
}

// url is a URL of the server for database name db, on port (the proxy's,
// or the server's own).
func (c *cluster) url(port int, db string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", port, db)
}
