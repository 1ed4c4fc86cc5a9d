package cli

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// releaseExecutablePages drops the executable's read-only mappings (code,
// constants, the function tables) from the process's resident set with
// MADV_DONTNEED, and returns their size. A private file mapping no page
// of which was ever written is the file's page cache, so a page touched
// again is mapped again from it, as at its first use. A mapping with a
// page of its own (Anonymous in smaps: the relocated read-only data of a
// dynamically linked build, written by the loader before it was made
// read-only) is left alone, as is everything writable: dropped, such a
// page would come back as the file's bytes, not what was written.
func releaseExecutablePages() (released int64, err error) {
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		return 0, err
	}
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	type span struct {
		start, end uintptr
		ok         bool
	}
	var spans []span
	var cur *span
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		fields := strings.Fields(line)
		if len(fields) >= 5 && strings.Contains(fields[0], "-") && len(fields[1]) == 4 {
			// A mapping's header: range, permissions, offset, device,
			// inode, path.
			cur = nil
			if len(fields) < 6 || fields[5] != exe || fields[1][1] != '-' {
				continue
			}
			lo, hi, _ := strings.Cut(fields[0], "-")
			start, err1 := strconv.ParseUint(lo, 16, 64)
			end, err2 := strconv.ParseUint(hi, 16, 64)
			if err1 != nil || err2 != nil {
				continue
			}
			spans = append(spans, span{start: uintptr(start), end: uintptr(end), ok: true})
			cur = &spans[len(spans)-1]
			continue
		}
		if cur != nil && len(fields) >= 2 && fields[0] == "Anonymous:" && fields[1] != "0" {
			cur.ok = false
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	for _, s := range spans {
		if !s.ok {
			continue
		}
		if _, _, errno := syscall.Syscall(syscall.SYS_MADVISE, s.start, s.end-s.start, syscall.MADV_DONTNEED); errno != 0 {
			return released, errno
		}
		released += int64(s.end - s.start)
	}
	return released, nil
}
