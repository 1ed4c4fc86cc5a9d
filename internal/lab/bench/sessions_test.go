package bench

import (
	"slices"
	"testing"
)

// TestSocketPortsCountsEachSocketOnce: /proc/net/tcp read while sockets
// come and go gives a line twice (socketPorts); the socket is one session.
func TestSocketPortsCountsEachSocketOnce(t *testing.T) {
	const head = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
	// 127.0.0.1:40000 and :40002 to :5432 (0x1538), the daemon's; one to
	// another port; one of the daemon's closing (FIN_WAIT1); one not the
	// daemon's.
	a := "   0: 0100007F:9C40 0100007F:1538 01 00000000:00000000 00:00000000 00000000     0        0 1001 1 0000000000000000 20 4 0 10 -1\n"
	b := "   1: 0100007F:9C42 0100007F:1538 01 00000000:00000000 00:00000000 00000000     0        0 1002 1 0000000000000000 20 4 0 10 -1\n"
	other := "   2: 0100007F:9C44 0100007F:1F90 01 00000000:00000000 00:00000000 00000000     0        0 1003 1 0000000000000000 20 4 0 10 -1\n"
	closing := "   3: 0100007F:9C46 0100007F:1538 04 00000000:00000000 00:00000000 00000000     0        0 1004 1 0000000000000000 20 4 0 10 -1\n"
	notOurs := "   4: 0100007F:9C48 0100007F:1538 01 00000000:00000000 00:00000000 00000000     0        0 2001 1 0000000000000000 20 4 0 10 -1\n"
	inodes := map[string]bool{"1001": true, "1002": true, "1003": true, "1004": true}

	// The table as a read that resumed at a shifted position gives it:
	// a and b twice.
	table := head + a + b + other + closing + notOurs + a + b
	got := socketPorts([]string{table, head}, inodes, 5432)
	slices.Sort(got)
	if want := []int32{40000, 40002}; !slices.Equal(got, want) {
		t.Fatalf("socketPorts = %v, want %v: each socket once", got, want)
	}
}
