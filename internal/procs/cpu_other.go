//go:build !unix

package procs

import "time"

// processCPU has no reading here: the Governor leaves the Ps alone.
func processCPU() (time.Duration, bool) { return 0, false }
