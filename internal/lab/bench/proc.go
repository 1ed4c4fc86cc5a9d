package bench

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// peakRSS returns the process's peak resident set (VmHWM) in bytes.
func (d *daemon) peakRSS() (int64, error) {
	f, err := os.Open(filepath.Join("/proc", strconv.Itoa(d.cmd.Process.Pid), "status"))
	if err != nil {
		return 0, fmt.Errorf("bench: read the daemon's memory: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("bench: parse VmHWM %q: %w", v, err)
			}
			return kb << 10, nil
		}
	}
	return 0, errors.New("bench: no VmHWM in /proc/<pid>/status")
}

// cpuSeconds returns the user and system CPU time the process used so far.
func (d *daemon) cpuSeconds() (float64, error) {
	return procCPUSeconds(strconv.Itoa(d.cmd.Process.Pid))
}

// procCPUSeconds returns the user and system CPU time process pid ("self"
// for this one) used so far.
func procCPUSeconds(pid string) (float64, error) {
	raw, err := os.ReadFile(filepath.Join("/proc", pid, "stat"))
	if err != nil {
		return 0, fmt.Errorf("bench: read a process's cpu time: %w", err)
	}
	// Fields after the command name, which is in parentheses: utime and
	// stime are the 12th and 13th of them, in clock ticks (100 a second on
	// Linux).
	_, rest, ok := strings.Cut(string(raw), ") ")
	f := strings.Fields(rest)
	if !ok || len(f) < 13 {
		return 0, errors.New("bench: unexpected /proc/<pid>/stat")
	}
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (ut + st) / 100, nil
}

// postgresCPUSeconds returns the CPU time used so far by the PostgreSQL
// processes of this machine that are still running (0 when the database
// is elsewhere). Sampled around a run, it is what the server spent on it:
// the bench's own sessions are idle meanwhile, and a backend that exits
// in between is missed.
func postgresCPUSeconds() float64 {
	ents, _ := os.ReadDir("/proc")
	var sum float64
	for _, e := range ents {
		comm, err := os.ReadFile(filepath.Join("/proc", e.Name(), "comm"))
		if err != nil || !strings.HasPrefix(string(comm), "postgres") {
			continue
		}
		if s, err := procCPUSeconds(e.Name()); err == nil {
			sum += s
		}
	}
	return sum
}
