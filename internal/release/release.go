package release

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"time"

	"github.com/gpuplane/gpuplane/internal/imagebuild"
	"github.com/gpuplane/gpuplane/internal/version"
)

// Platforms the CLI is released for.
var Platforms = []string{"linux/amd64", "linux/arm64", "darwin/amd64", "darwin/arm64"}

// Commands are gpuplane's binaries; the first is the CLI.
var Commands = []string{"gpuplane", "gpuplane-agent", "gpuplane-scheduler"}

// ArchiveFiles are the files of the module root packed beside the CLI.
var ArchiveFiles = []string{"LICENSE", "README.md"}

// Options say what to build and where.
type Options struct {
	// Module is the directory of gpuplane's Go module.
	Module string
	// Out is the directory written; it is created, and files of the same
	// names are replaced.
	Out string
	// Version, Commit and Date stamp the binaries and name the archives.
	// Date is the commit's time; it also stamps the archives' files.
	Version, Commit string
	Date            time.Time
	// Platforms of the CLI archives; empty means Platforms.
	Platforms []string
	// DownloadURL is where the archives will be published, the krew
	// manifest's URIs: DownloadURL/<archive>.
	DownloadURL string
	// Images, when set, also builds the images (Image holds their options;
	// Out, Version, Revision and Epoch are filled in here).
	Images bool
	Image  imagebuild.Options
	// WorkDir holds the binaries between the steps; empty uses a temporary
	// directory.
	WorkDir string
	// Log receives progress; nil discards it.
	Log *slog.Logger
}

// Result lists what was written, by path relative to Out.
type Result struct {
	Archives  []string
	SBOM      string
	Krew      string
	Images    []string
	Checksums string
}

// Build builds the release into o.Out.
func Build(ctx context.Context, o Options) (*Result, error) {
	if err := o.check(); err != nil {
		return nil, err
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if len(o.Platforms) == 0 {
		o.Platforms = Platforms
	}
	if err := os.MkdirAll(o.Out, 0o755); err != nil {
		return nil, err
	}
	work := o.WorkDir
	if work == "" {
		dir, err := os.MkdirTemp("", "gpuplane-release-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(dir)
		work = dir
	}
	r := &Result{}
	var archives []archive
	for _, p := range o.Platforms {
		goos, goarch, ok := strings.Cut(p, "/")
		if !ok {
			return nil, fmt.Errorf("platform %q: want os/arch", p)
		}
		bin := filepath.Join(work, goos+"_"+goarch, Commands[0])
		o.Log.Info("building the CLI", "platform", p)
		if err := o.goBuild(ctx, Commands[0], goos, goarch, false, bin); err != nil {
			return nil, err
		}
		name := fmt.Sprintf("%s_%s_%s_%s.tar.gz", Commands[0], o.Version, goos, goarch)
		sum, err := o.writeArchive(bin, filepath.Join(o.Out, name))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		archives = append(archives, archive{name: name, os: goos, arch: goarch, sha256: sum})
		r.Archives = append(r.Archives, name)
	}

	// The SBOM lists the modules of all three binaries, as built for the
	// host's Linux platform (the images' binaries link the same).
	bins := map[string]string{}
	for _, c := range Commands {
		bin := filepath.Join(work, "sbom", c)
		o.Log.Info("building for the SBOM", "command", c)
		if err := o.goBuild(ctx, c, "linux", runtime.GOARCH, c == "gpuplane-agent", bin); err != nil {
			return nil, err
		}
		bins[c] = bin
	}
	r.SBOM = fmt.Sprintf("gpuplane_%s.sbom.cdx.json", o.Version)
	if err := writeSBOM(filepath.Join(o.Out, r.SBOM), o.Version, o.Date, bins); err != nil {
		return nil, fmt.Errorf("the SBOM: %w", err)
	}

	r.Krew = "gpuplane.krew.yaml"
	if err := writeKrew(filepath.Join(o.Out, r.Krew), o.Version, o.DownloadURL, archives); err != nil {
		return nil, fmt.Errorf("the krew manifest: %w", err)
	}

	if o.Images {
		names, err := o.images(ctx, work)
		if err != nil {
			return nil, err
		}
		r.Images = names
	}

	files := append(append(append([]string{}, r.Archives...), r.SBOM, r.Krew), r.Images...)
	r.Checksums = "checksums.txt"
	if err := writeChecksums(o.Out, r.Checksums, files); err != nil {
		return nil, err
	}
	return r, nil
}

func (o *Options) check() error {
	switch {
	case o.Module == "":
		return fmt.Errorf("release: the module directory is empty")
	case o.Out == "":
		return fmt.Errorf("release: --out is empty")
	case !validVersion(o.Version):
		return fmt.Errorf("release: --version %q: want a v-prefixed semantic version (v1.2.3, v0.0.0-abc): krew and the archive names need one", o.Version)
	case o.Date.IsZero():
		return fmt.Errorf("release: --date is empty: give the commit's time")
	case o.DownloadURL == "":
		return fmt.Errorf("release: --download-url is empty")
	}
	if strings.ContainsAny(o.Commit, " \t\n") {
		return fmt.Errorf("release: --commit %q has white space", o.Commit)
	}
	return nil
}

// validVersion accepts v<major>.<minor>.<patch> with an optional
// pre-release and build part of the characters semver allows.
func validVersion(v string) bool {
	rest, ok := strings.CutPrefix(v, "v")
	if !ok {
		return false
	}
	core, extra, _ := strings.Cut(rest, "-")
	if c, b, plus := strings.Cut(core, "+"); plus {
		core, extra = c, b
	}
	nums := strings.Split(core, ".")
	if len(nums) != 3 {
		return false
	}
	for _, n := range nums {
		if n == "" || strings.Trim(n, "0123456789") != "" || len(n) > 1 && n[0] == '0' {
			return false
		}
	}
	for _, c := range extra {
		if !semverChar(c) {
			return false
		}
	}
	return true
}

// semverChar says whether c may appear in a pre-release or build part.
func semverChar(c rune) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '.' || c == '+'
}

// goBuild compiles command for goos/goarch into out, reproducibly and
// stamped; cgo only where asked (the agent, which loads NVML).
func (o *Options) goBuild(ctx context.Context, command, goos, goarch string, cgo bool, out string) error {
	ldflags := "-s -w -buildid= " + version.LDFlags(o.Version, o.Commit, o.Date.UTC().Format(time.RFC3339))
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags="+ldflags, "-o", out, "./cmd/"+command)
	cmd.Dir = o.Module
	cgoEnv := "CGO_ENABLED=0"
	if cgo {
		cgoEnv = "CGO_ENABLED=1"
	}
	// GOFLAGS is cleared: a release is what a plain go build gives.
	cmd.Env = append(os.Environ(), "GOOS="+goos, "GOARCH="+goarch, cgoEnv, "GOFLAGS=", "CGO_CFLAGS=-O2 -g -Wno-deprecated-declarations")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s for %s/%s: %w\n%s", command, goos, goarch, err, b)
	}
	return nil
}

// writeArchive packs the binary with ArchiveFiles into a tar.gz at path
// and returns its SHA-256.
func (o *Options) writeArchive(bin, path string) (string, error) {
	var buf bytes.Buffer
	gz, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if err != nil {
		return "", err
	}
	tw := tar.NewWriter(gz)
	entries := []struct{ src, name string }{{bin, Commands[0]}}
	for _, f := range ArchiveFiles {
		entries = append(entries, struct{ src, name string }{filepath.Join(o.Module, f), f})
	}
	for _, e := range entries {
		if err := addFile(tw, e.src, e.name, o.Date); err != nil {
			return "", err
		}
	}
	if err := tw.Close(); err != nil {
		return "", err
	}
	if err := gz.Close(); err != nil {
		return "", err
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		return "", err
	}
	sum := sha256.Sum256(buf.Bytes())
	return hex.EncodeToString(sum[:]), nil
}

// addFile writes one regular file with fixed owner and time; executables
// keep their execute bits.
func addFile(tw *tar.Writer, src, name string, mtime time.Time) error {
	f, err := os.Open(src)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	mode := int64(0o644)
	if st.Mode()&0o111 != 0 {
		mode = 0o755
	}
	h := &tar.Header{Name: name, Mode: mode, Size: st.Size(), ModTime: mtime.UTC(), Typeflag: tar.TypeReg, Format: tar.FormatPAX,
		Uname: "root", Gname: "root"}
	if err := tw.WriteHeader(h); err != nil {
		return err
	}
	_, err = io.Copy(tw, f)
	return err
}

// images builds each image into an OCI layout of its own and archives it
// as <name>_<version>.oci.tar.
func (o *Options) images(ctx context.Context, work string) ([]string, error) {
	var names []string
	for _, im := range imagebuild.Images {
		imo := o.Image
		imo.Module, imo.Version, imo.Revision, imo.Epoch = o.Module, o.Version, o.Commit, o.Date
		imo.Images = []string{im.Name}
		imo.Out = filepath.Join(work, "images", im.Name)
		if imo.Log == nil {
			imo.Log = o.Log
		}
		if err := os.RemoveAll(imo.Out); err != nil {
			return nil, err
		}
		o.Log.Info("building the image", "image", im.Name)
		if _, err := imagebuild.Build(ctx, imo); err != nil {
			return nil, fmt.Errorf("image %s: %w", im.Name, err)
		}
		name := fmt.Sprintf("%s_%s.oci.tar", im.Name, o.Version)
		if err := tarDir(imo.Out, filepath.Join(o.Out, name), o.Date); err != nil {
			return nil, fmt.Errorf("archiving the image %s: %w", im.Name, err)
		}
		names = append(names, name)
	}
	return names, nil
}

// tarDir writes the tree under dir as an uncompressed tar at path, entries
// sorted and stamped with mtime: an OCI image layout archive when dir is a
// layout.
func tarDir(dir, path string, mtime time.Time) error {
	var files []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p != dir {
			files = append(files, p)
		}
		return nil
	})
	if err != nil {
		return err
	}
	sort.Strings(files)
	out, err := os.Create(path)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(out)
	for _, p := range files {
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		st, err := os.Stat(p)
		if err != nil {
			return err
		}
		if st.IsDir() {
			if err := tw.WriteHeader(&tar.Header{Name: rel + "/", Mode: 0o755, ModTime: mtime.UTC(), Typeflag: tar.TypeDir, Format: tar.FormatPAX}); err != nil {
				return err
			}
			continue
		}
		if err := addFile(tw, p, rel, mtime); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// writeChecksums writes name in dir: the SHA-256 of each file, as
// sha256sum prints them (and `sha256sum -c` reads them).
func writeChecksums(dir, name string, files []string) error {
	sorted := append([]string(nil), files...)
	sort.Strings(sorted)
	var b strings.Builder
	for _, f := range sorted {
		sum, err := fileSHA256(filepath.Join(dir, f))
		if err != nil {
			return err
		}
		fmt.Fprintf(&b, "%s  %s\n", sum, f)
	}
	return os.WriteFile(filepath.Join(dir, name), []byte(b.String()), 0o644)
}

func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
