//go:build !linux

package cli

// releaseExecutablePages does nothing outside Linux.
func releaseExecutablePages() (int64, error) { return 0, nil }
