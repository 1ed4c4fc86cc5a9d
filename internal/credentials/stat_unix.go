package credentials

import (
	"fmt"
	"os"
	"syscall"
)

// statFile follows symlinks, as a Kubernetes Secret's ..data swap needs:
// the file's own inode and times change with the swap.
func statFile(file string) (fileID, error) {
	fi, err := os.Stat(file)
	if err != nil {
		return fileID{}, fmt.Errorf("cannot read file %s: %w", file, unwrapPath(err))
	}
	id := fileID{size: fi.Size(), modTime: fi.ModTime()}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		id.ino = st.Ino
	}
	return id, nil
}

func unwrapPath(err error) error {
	if pe, ok := err.(*os.PathError); ok {
		return pe.Err
	}
	return err
}
