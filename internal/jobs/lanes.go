package jobs

import (
	"strconv"
	"strings"
)

// laneSep separates a source's name from its lane in a lane's name. Source
// names never hold it (config: letters, digits and _ - . $), so a lane's
// name is never a source's.
const laneSep = "@"

// LaneName names lane of a source with a tenant column (docs/protocol.md
// section 10): its job's argument, its lock, its checkpoint and its
// wake-ups, as a source's name names them. "contacts@3".
func LaneName(source string, lane int) string {
	return source + laneSep + strconv.Itoa(lane)
}

// LaneOf reads a lane's name back into its source and lane; ok is false
// for any other name.
func LaneOf(name string) (source string, lane int, ok bool) {
	i := strings.LastIndex(name, laneSep)
	if i <= 0 {
		return "", 0, false
	}
	n, err := strconv.Atoi(name[i+1:])
	if err != nil || n < 0 || strconv.Itoa(n) != name[i+1:] {
		return "", 0, false
	}
	return name[:i], n, true
}
