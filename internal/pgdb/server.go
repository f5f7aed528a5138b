package pgdb

import (
	"errors"
	"os"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"syscall"
)

// DistroBinGlob is where Debian's packages put each major's server binaries.
const DistroBinGlob = "/usr/lib/postgresql/*/bin"

// ServerBinDirs returns the directories matching glob (a pattern like
// DistroBinGlob, whose parent's name is the major) that hold both initdb
// and postgres, newest major first.
func ServerBinDirs(glob string) []string {
	dirs, _ := filepath.Glob(glob)
	major := func(d string) int {
		v, _ := strconv.Atoi(filepath.Base(filepath.Dir(d)))
		return v
	}
	sort.Slice(dirs, func(i, j int) bool { return major(dirs[i]) > major(dirs[j]) })
	var out []string
	for _, d := range dirs {
		_, e1 := os.Stat(filepath.Join(d, "postgres"))
		_, e2 := os.Stat(filepath.Join(d, "initdb"))
		if e1 == nil && e2 == nil {
			out = append(out, d)
		}
	}
	return out
}

// ServerCredential returns the user to run a PostgreSQL server as, which
// refuses to run as root: nil (ourselves) unless we are root, then
// "postgres" or else "nobody", with its name.
func ServerCredential() (*syscall.Credential, string, error) {
	if os.Geteuid() != 0 {
		return nil, "", nil
	}
	for _, name := range []string{"postgres", "nobody"} {
		u, err := user.Lookup(name)
		if err != nil {
			continue
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, name, nil
	}
	return nil, "", errors.New("running as root and neither user postgres nor nobody exists to run PostgreSQL as; create user postgres")
}
