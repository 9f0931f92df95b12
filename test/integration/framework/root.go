package framework

import (
	"path/filepath"
	"runtime"
)

// RepoRoot is the repository's root directory, found from this file's
// place in it, whatever directory a test runs in.
func RepoRoot() string {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		panic("framework: the call stack does not name this file")
	}
	return filepath.Join(filepath.Dir(file), "..", "..", "..")
}
