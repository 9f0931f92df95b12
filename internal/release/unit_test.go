package release

import (
	"archive/tar"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestValidVersion(t *testing.T) {
	for v, want := range map[string]bool{
		"v0.1.0": true, "v1.22.333": true, "v0.0.0-dcade43abc12": true, "v0.1.0-3-gabc1234-dirty": true, "v1.0.0-rc.1+build.5": true,
		"": false, "0.1.0": false, "v0.1": false, "v01.0.0": false, "v0.1.0-a b": false, "v0.1.0/../x": false, "vX.Y.Z": false,
	} {
		if got := validVersion(v); got != want {
			t.Errorf("validVersion(%q) = %v, want %v", v, got, want)
		}
	}
}

func TestOptionsCheckNamesTheFlag(t *testing.T) {
	ok := Options{Module: ".", Out: "dist", Version: "v0.1.0", Date: testDate, DownloadURL: "https://x"}
	for _, tc := range []struct {
		name string
		edit func(*Options)
		want string
	}{
		{"version", func(o *Options) { o.Version = "latest" }, "--version"},
		{"date", func(o *Options) { o.Date = time.Time{} }, "--date"},
		{"commit", func(o *Options) { o.Commit = "abc def" }, "--commit"},
		{"out", func(o *Options) { o.Out = "" }, "--out"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := ok
			tc.edit(&o)
			if err := o.check(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("check() = %v, want an error naming %s", err, tc.want)
			}
		})
	}
	if err := ok.check(); err != nil {
		t.Errorf("valid options refused: %v", err)
	}
}

// TestTarDir archives a tree as an OCI layout archive is written: sorted
// entries, directories first, fixed times.
func TestTarDir(t *testing.T) {
	dir := t.TempDir()
	for name, body := range map[string]string{"oci-layout": `{"imageLayoutVersion":"1.0.0"}`, "index.json": "{}", "blobs/sha256/ab": "x"} {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out := filepath.Join(t.TempDir(), "image.oci.tar")
	if err := tarDir(dir, out, testDate); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr := tar.NewReader(f)
	var names []string
	for {
		h, err := tr.Next()
		if err != nil {
			break
		}
		if !h.ModTime.Equal(testDate) {
			t.Errorf("%s has time %s", h.Name, h.ModTime)
		}
		names = append(names, h.Name)
	}
	if got, want := strings.Join(names, " "), "blobs/ blobs/sha256/ blobs/sha256/ab index.json oci-layout"; got != want {
		t.Errorf("entries %q, want %q", got, want)
	}
}
