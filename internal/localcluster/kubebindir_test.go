package localcluster

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// With KubeBinDir the Kubernetes components come from it and etcd and kwok
// from BinDir; a component missing there is named with the directory.
func TestKubeBinDir(t *testing.T) {
	bin, kube := t.TempDir(), t.TempDir()
	touch := func(dir string, names ...string) {
		for _, n := range names {
			if err := os.WriteFile(filepath.Join(dir, n), []byte("#!/bin/sh\n"), 0o755); err != nil {
				t.Fatal(err)
			}
		}
	}
	touch(bin, BinEtcd, BinKubeAPIServer, BinControllerManager, BinKwok)
	touch(kube, BinKubeAPIServer)

	cfg := Config{BinDir: bin, KubeBinDir: kube, Kwok: true}
	paths, err := cfg.resolveBinaries(bin)
	if err != nil {
		t.Fatal(err)
	}
	for name, dir := range map[string]string{BinEtcd: bin, BinKwok: bin, BinKubeAPIServer: kube} {
		if want := filepath.Join(dir, name); paths[name] != want {
			t.Errorf("%s from %s, want %s", name, paths[name], want)
		}
	}

	cfg.ControllerManager = true
	_, err = cfg.resolveBinaries(bin)
	if !errors.Is(err, ErrBinaryMissing) || !strings.Contains(err.Error(), kube) || !strings.Contains(err.Error(), BinControllerManager) {
		t.Fatalf("kube-controller-manager missing from KubeBinDir: %v, want ErrBinaryMissing naming it and %s", err, kube)
	}

	cfg = Config{BinDir: bin, ControllerManager: true}
	if paths, err = cfg.resolveBinaries(bin); err != nil || paths[BinKubeAPIServer] != filepath.Join(bin, BinKubeAPIServer) {
		t.Fatalf("without KubeBinDir: %v, %v; want every binary from BinDir", paths, err)
	}
}
