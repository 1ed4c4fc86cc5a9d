package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// A scratch PostgreSQL cluster of the bench's own (issue 57): the
// database's share is every PostgreSQL process's CPU, which only a
// cluster nobody else uses can give. The test database is shared with
// every other session of the machine, its CPU theirs too.

// pgBinDefault is where the cluster's programs are unless
// SYNCER_BENCH_PG_BIN says otherwise: Debian's PostgreSQL 15, the
// version the figures were measured on.
const pgBinDefault = "/usr/lib/postgresql/15/bin"

func pgBin() string {
	if d := os.Getenv("SYNCER_BENCH_PG_BIN"); d != "" {
		return d
	}
	return pgBinDefault
}

// cluster is a PostgreSQL cluster in a temporary directory, on a port of
// its own, trust authentication on loopback, removed by stop.
type cluster struct {
	dir  string
	bin  string
	port int
	url  string // the postgres database, as the superuser postgres
	// cred runs the server as the postgres user when the bench runs as
	// root: initdb and postgres refuse root.
	cred *syscall.Credential
}

// clusterConf is appended to the cluster's postgresql.conf: what the
// measurement reads (pg_stat_statements, every statement, the triggers'
// too) and what a logical-decoding reader needs.
const clusterConf = `
listen_addresses = '127.0.0.1'
shared_preload_libraries = 'pg_stat_statements'
pg_stat_statements.track = all
pg_stat_statements.max = 2000
pg_stat_statements.track_planning = on
wal_level = logical
max_wal_senders = 4
max_replication_slots = 4
`

// startCluster initdbs and starts a cluster; stop ends and removes it.
func startCluster(ctx context.Context) (_ *cluster, err error) {
	c := &cluster{bin: pgBin()}
	if _, err := os.Stat(filepath.Join(c.bin, "initdb")); err != nil {
		return nil, fmt.Errorf("bench: no PostgreSQL programs in %s (SYNCER_BENCH_PG_BIN): %w", c.bin, err)
	}
	if c.dir, err = os.MkdirTemp("", "syncer-bench-pg-"); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			c.stop()
		}
	}()
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			return nil, fmt.Errorf("bench: running as root, the cluster needs the postgres user: %w", err)
		}
		uid, _ := strconv.ParseUint(u.Uid, 10, 32)
		gid, _ := strconv.ParseUint(u.Gid, 10, 32)
		c.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		if err := os.Chown(c.dir, int(uid), int(gid)); err != nil {
			return nil, err
		}
	}
	if err := c.run(ctx, "initdb", "-D", c.data(), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync"); err != nil {
		return nil, err
	}
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	_, p, _ := strings.Cut(addr, ":")
	c.port, _ = strconv.Atoi(p)
	conf := fmt.Sprintf("port = %d\nunix_socket_directories = '%s'\n", c.port, c.dir) + clusterConf
	f, err := os.OpenFile(filepath.Join(c.data(), "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return nil, err
	}
	_, err = f.WriteString(conf)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, err
	}
	if err := c.run(ctx, "pg_ctl", "-D", c.data(), "-l", filepath.Join(c.dir, "log"), "-w", "-t", "60", "start"); err != nil {
		return nil, err
	}
	c.url = fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres", c.port)
	conn, err := pgx.Connect(ctx, c.url)
	if err != nil {
		return nil, fmt.Errorf("bench: connect to the scratch cluster: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, `CREATE EXTENSION pg_stat_statements`); err != nil {
		return nil, fmt.Errorf("bench: scratch cluster: %w", err)
	}
	return c, nil
}

func (c *cluster) data() string { return filepath.Join(c.dir, "data") }

// run runs one of the cluster's programs as the cluster's owner.
func (c *cluster) run(ctx context.Context, prog string, args ...string) error {
	cmd := exec.CommandContext(ctx, filepath.Join(c.bin, prog), args...)
	cmd.Dir = c.dir
	if c.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred}
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("bench: %s: %w: %s", prog, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// stop ends the server, if it runs, and removes the directory.
func (c *cluster) stop() {
	if c.dir == "" {
		return
	}
	if _, err := os.Stat(filepath.Join(c.data(), "postmaster.pid")); err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		_ = c.run(ctx, "pg_ctl", "-D", c.data(), "-m", "fast", "-w", "stop")
		cancel()
	}
	_ = os.RemoveAll(c.dir)
	c.dir = ""
}

// postmaster is the server's process id.
func (c *cluster) postmaster() (int, error) {
	raw, err := os.ReadFile(filepath.Join(c.data(), "postmaster.pid"))
	if err != nil {
		return 0, fmt.Errorf("bench: the scratch cluster's pid: %w", err)
	}
	line, _, _ := strings.Cut(string(raw), "\n")
	return strconv.Atoi(strings.TrimSpace(line))
}

// cpuSample is the CPU the cluster's processes used so far: total counts
// the postmaster, its children that exited (its cutime and cstime: a
// backend that ends in a phase is counted) and those running; byPID the
// running children, to be told apart by pg_stat_activity.
type cpuSample struct {
	total float64
	byPID map[int]float64
}

// sampleCPU reads /proc for the postmaster and every process whose parent
// it is.
func (c *cluster) sampleCPU() (cpuSample, error) {
	s := cpuSample{byPID: map[int]float64{}}
	pm, err := c.postmaster()
	if err != nil {
		return s, err
	}
	f, err := procStat(pm)
	if err != nil {
		return s, err
	}
	s.total = f.utime + f.stime + f.cutime + f.cstime
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return s, err
	}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == pm {
			continue
		}
		st, err := procStat(pid)
		if err != nil || st.ppid != pm {
			continue
		}
		s.byPID[pid] = st.utime + st.stime
		s.total += st.utime + st.stime
	}
	return s, nil
}

// statFields are the fields of /proc/<pid>/stat the cluster's sample
// reads, times in seconds.
type statFields struct {
	ppid                         int
	utime, stime, cutime, cstime float64
}

func procStat(pid int) (statFields, error) {
	var f statFields
	raw, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return f, err
	}
	// After the command name, in parentheses: state, ppid, ..., utime,
	// stime, cutime, cstime the 12th to 15th, in clock ticks (100 a
	// second on Linux).
	i := strings.LastIndex(string(raw), ") ")
	if i < 0 {
		return f, errors.New("bench: unexpected /proc/<pid>/stat")
	}
	fields := strings.Fields(string(raw[i+2:]))
	if len(fields) < 15 {
		return f, errors.New("bench: unexpected /proc/<pid>/stat")
	}
	f.ppid, _ = strconv.Atoi(fields[1])
	tick := func(s string) float64 { v, _ := strconv.ParseFloat(s, 64); return v / 100 }
	f.utime, f.stime, f.cutime, f.cstime = tick(fields[11]), tick(fields[12]), tick(fields[13]), tick(fields[14])
	return f, nil
}

// logTail is the end of the cluster's log, for an error.
func (c *cluster) logTail() string {
	f, err := os.Open(filepath.Join(c.dir, "log"))
	if err != nil {
		return ""
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if len(lines) > 20 {
			lines = lines[1:]
		}
	}
	return strings.Join(lines, "\n")
}
