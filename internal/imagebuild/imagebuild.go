// Package imagebuild builds gpuplane's container images from Go, without a
// container engine: each command is compiled for each platform, packed
// into layers with fixed timestamps and owners, and assembled into OCI
// images and one multi-platform index per image with go-containerregistry,
// so the same commit gives the same digests.
//
// gpuplane-agent is built with cgo (go-nvml loads libnvidia-ml.so.1 from
// the host at run time), so its image carries the C library it links
// against, taken from Debian's packages (libc6, and libc6-arm64-cross for
// arm64). The scheduler and the CLI are static.
//
// Every binary is stamped with Options.Version, Revision and Epoch
// (internal/version).
//
// It builds and writes images only; pushing is Push's, from a written
// layout.
package imagebuild

import (
	"archive/tar"
	"bytes"
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/gpuplane/gpuplane/internal/version"
)

// Image is one of gpuplane's images.
type Image struct {
	// Name is the command and the image's name: gpuplane-agent, ...
	Name string
	// Cgo marks a command linked against the C library.
	Cgo bool
}

// Images are gpuplane's images.
var Images = []Image{
	{Name: "gpuplane-agent", Cgo: true},
	{Name: "gpuplane-scheduler"},
	{Name: "gpuplane"},
}

// Platforms gpuplane's images are built for.
var Platforms = []string{"linux/amd64", "linux/arm64"}

// NonRoot is the user images run as unless a pod says otherwise.
const NonRoot = "65532:65532"

// RefNameAnnotation names an index in an OCI layout.
const RefNameAnnotation = "org.opencontainers.image.ref.name"

// Options say what to build and where.
type Options struct {
	// Module is the directory of gpuplane's Go module.
	Module string
	// Images and Platforms to build; empty means all.
	Images    []string
	Platforms []string
	// Registry and Version name the images: Registry/<name>:Version.
	Registry, Version string
	// Revision is the commit, for the images' labels.
	Revision string
	// Epoch stamps every file and the images' creation time (the commit's
	// time), so a rebuild gives the same digests.
	Epoch time.Time
	// WorkDir holds the builds and Debian packages between runs.
	WorkDir string
	// Out is the OCI layout directory written.
	Out string
	// GoFlags are extra `go build` flags (tags).
	GoFlags []string
	// Log receives progress; nil discards it.
	Log *slog.Logger
}

// Built is one image of one platform.
type Built struct {
	Image, Platform string
	// Digest of the platform's image; Index of the image's index.
	Digest, Index v1.Hash
	// Compressed is the sum of the layers' and config's sizes as stored.
	Compressed int64
	// Debian is the libc package's version for cgo images.
	Debian string
}

// Build builds the images and writes them as an OCI layout to o.Out, one
// index per image annotated with its reference.
func Build(ctx context.Context, o Options) ([]Built, error) {
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if len(o.Platforms) == 0 {
		o.Platforms = Platforms
	}
	images := Images
	if len(o.Images) > 0 {
		images = nil
		for _, n := range o.Images {
			i := slices.IndexFunc(Images, func(im Image) bool { return im.Name == n })
			if i < 0 {
				return nil, fmt.Errorf("no image %q (images: gpuplane-agent, gpuplane-scheduler, gpuplane)", n)
			}
			images = append(images, Images[i])
		}
	}
	for _, p := range o.Platforms {
		if !slices.Contains(Platforms, p) {
			return nil, fmt.Errorf("platform %q: want %s", p, strings.Join(Platforms, " or "))
		}
	}
	if err := os.RemoveAll(o.Out); err != nil {
		return nil, err
	}
	lp, err := layout.Write(o.Out, empty.Index)
	if err != nil {
		return nil, fmt.Errorf("writing the OCI layout: %w", err)
	}
	var out []Built
	for _, im := range images {
		idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
		var built []Built
		for _, plat := range o.Platforms {
			start := time.Now()
			img, b, err := buildImage(ctx, o, im, plat)
			if err != nil {
				return nil, fmt.Errorf("%s %s: %w", im.Name, plat, err)
			}
			osName, arch, _ := strings.Cut(plat, "/")
			idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: osName, Architecture: arch}}})
			o.Log.Info("built", "image", im.Name, "platform", plat, "digest", b.Digest.String(), "compressed", b.Compressed, "took", time.Since(start).Round(time.Millisecond))
			built = append(built, b)
		}
		ref := strings.TrimSuffix(o.Registry, "/") + "/" + im.Name + ":" + o.Version
		if err := lp.AppendIndex(idx, layout.WithAnnotations(map[string]string{RefNameAnnotation: ref})); err != nil {
			return nil, fmt.Errorf("writing %s: %w", ref, err)
		}
		d, err := idx.Digest()
		if err != nil {
			return nil, err
		}
		for i := range built {
			built[i].Index = d
		}
		out = append(out, built...)
	}
	return out, nil
}

// buildImage compiles the command for plat and assembles its image.
func buildImage(ctx context.Context, o Options, im Image, plat string) (v1.Image, Built, error) {
	b := Built{Image: im.Name, Platform: plat}
	osName, arch, _ := strings.Cut(plat, "/")
	binDir := filepath.Join(o.WorkDir, "build", osName+"-"+arch)
	if err := os.MkdirAll(binDir, 0o755); err != nil {
		return nil, b, err
	}
	bin := filepath.Join(binDir, im.Name)
	if err := goBuild(ctx, o, im, osName, arch, bin); err != nil {
		return nil, b, err
	}
	var files []file
	files = append(files, baseFiles()...)
	if im.Cgo {
		libs, version, err := debianLibc(ctx, o, arch)
		if err != nil {
			return nil, b, err
		}
		if err := checkNeeded(bin, libs); err != nil {
			return nil, b, err
		}
		files = append(files, libs...)
		b.Debian = version
	}
	binData, err := os.ReadFile(bin)
	if err != nil {
		return nil, b, err
	}
	base, err := layer(files, o.Epoch)
	if err != nil {
		return nil, b, err
	}
	app, err := layer([]file{{name: "usr/bin/" + im.Name, mode: 0o755, data: binData}}, o.Epoch)
	if err != nil {
		return nil, b, err
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	if img, err = mutate.AppendLayers(img, base, app); err != nil {
		return nil, b, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, b, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = osName, arch
	cf.Created = v1.Time{Time: o.Epoch}
	labels := map[string]string{
		"org.opencontainers.image.title":    im.Name,
		"org.opencontainers.image.source":   "https://github.com/gpuplane/gpuplane",
		"org.opencontainers.image.version":  o.Version,
		"org.opencontainers.image.revision": o.Revision,
		"org.opencontainers.image.licenses": "Apache-2.0",
	}
	if b.Debian != "" {
		labels["io.gpuplane.debian-libc6"] = b.Debian
	}
	cf.Config = v1.Config{
		Entrypoint: []string{"/usr/bin/" + im.Name},
		Env:        []string{"PATH=/usr/local/bin:/usr/bin:/bin"},
		User:       NonRoot,
		WorkingDir: "/",
		Labels:     labels,
	}
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		return nil, b, err
	}
	if b.Digest, err = img.Digest(); err != nil {
		return nil, b, err
	}
	if b.Compressed, err = storedSize(img); err != nil {
		return nil, b, err
	}
	return img, b, nil
}

// storedSize is what a registry stores of the image: compressed layers
// and config.
func storedSize(img v1.Image) (int64, error) {
	m, err := img.Manifest()
	if err != nil {
		return 0, err
	}
	n := m.Config.Size
	for _, l := range m.Layers {
		n += l.Size
	}
	return n, nil
}

// goBuild compiles the command reproducibly: no paths, no VCS stamp, no
// symbol table.
func goBuild(ctx context.Context, o Options, im Image, osName, arch, out string) error {
	ldflags := "-s -w -buildid= " + version.LDFlags(o.Version, o.Revision, o.Epoch.UTC().Format(time.RFC3339))
	args := append([]string{"build", "-trimpath", "-buildvcs=false", "-ldflags=" + ldflags, "-o", out}, o.GoFlags...)
	args = append(args, "./cmd/"+im.Name)
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = o.Module
	cmd.Env = append(os.Environ(), "GOOS="+osName, "GOARCH="+arch, "GOFLAGS=", "CGO_CFLAGS=-O2 -g -Wno-deprecated-declarations")
	if im.Cgo {
		cmd.Env = append(cmd.Env, "CGO_ENABLED=1")
		if cc := crossCC(arch); cc != "" {
			if _, err := exec.LookPath(cc); err != nil {
				return fmt.Errorf("building the cgo agent for %s needs the cross compiler %s (Debian package gcc-aarch64-linux-gnu; `make images` installs it): %w", arch, cc, err)
			}
			cmd.Env = append(cmd.Env, "CC="+cc)
		}
	} else {
		cmd.Env = append(cmd.Env, "CGO_ENABLED=0")
	}
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build: %w\n%s", err, b)
	}
	return nil
}

func hostArch() string { return runtime.GOARCH }

// crossCC is the C compiler for arch on this (amd64) machine, "" for the
// host's own.
func crossCC(arch string) string {
	if arch == "arm64" && hostArch() != "arm64" {
		return "aarch64-linux-gnu-gcc"
	}
	if arch == "amd64" && hostArch() != "amd64" {
		return "x86_64-linux-gnu-gcc"
	}
	return ""
}

// file is one entry of a layer: a regular file, a directory (dir) or a
// symlink (link).
type file struct {
	name string
	mode int64
	data []byte
	dir  bool
	link string
}

// baseFiles are what every image has besides its binary: a non-root user
// and a writable /tmp.
func baseFiles() []file {
	return []file{
		{name: "etc/passwd", mode: 0o644, data: []byte("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n")},
		{name: "etc/group", mode: 0o644, data: []byte("root:x:0:\nnonroot:x:65532:\n")},
		{name: "tmp", mode: 0o1777, dir: true},
		{name: "home/nonroot", mode: 0o755, dir: true},
	}
}

// layer packs files into a tar with parent directories, sorted, owned by
// root, stamped epoch.
func layer(files []file, epoch time.Time) (v1.Layer, error) {
	all := map[string]file{}
	for _, f := range files {
		all[f.name] = f
		for d := path.Dir(f.name); d != "." && d != "/"; d = path.Dir(d) {
			if _, ok := all[d]; !ok {
				all[d] = file{name: d, mode: 0o755, dir: true}
			}
		}
	}
	names := make([]string, 0, len(all))
	for n := range all {
		names = append(names, n)
	}
	sort.Strings(names)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, n := range names {
		f := all[n]
		h := &tar.Header{Name: n, Mode: f.mode, ModTime: epoch, Uname: "root", Gname: "root", Format: tar.FormatPAX}
		switch {
		case f.dir:
			h.Typeflag, h.Name = tar.TypeDir, n+"/"
		case f.link != "":
			h.Typeflag, h.Linkname = tar.TypeSymlink, f.link
		default:
			h.Typeflag, h.Size = tar.TypeReg, int64(len(f.data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := tw.Write(f.data); err != nil {
				return nil, err
			}
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	data := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil },
		tarball.WithMediaType(types.OCILayer))
}

// libcFiles are the C library's files an image takes: what the agent
// links and what the host's libnvidia-ml.so.1, loaded at run time, needs.
var libcFiles = []string{"libc.so.6", "libm.so.6", "libdl.so.2", "libpthread.so.0", "librt.so.1"}

// debianLibc downloads Debian's C library package for arch (cached in
// WorkDir) and returns its loader and libraries at the paths the
// architecture's binaries look for them, and the package's version.
func debianLibc(ctx context.Context, o Options, arch string) ([]file, string, error) {
	pkg, libDir, loader, loaderDir := "libc6", "lib/x86_64-linux-gnu", "ld-linux-x86-64.so.2", "lib64"
	if arch == "arm64" {
		pkg, libDir, loader, loaderDir = "libc6-arm64-cross", "lib/aarch64-linux-gnu", "ld-linux-aarch64.so.1", "lib"
	}
	deb, err := download(ctx, filepath.Join(o.WorkDir, "debs"), pkg)
	if err != nil {
		return nil, "", err
	}
	version, err := exec.CommandContext(ctx, "dpkg-deb", "-f", deb, "Version").Output()
	if err != nil {
		return nil, "", fmt.Errorf("reading %s: %w", deb, err)
	}
	contents, err := debFiles(ctx, deb)
	if err != nil {
		return nil, "", err
	}
	find := func(name string) ([]byte, error) {
		for p, data := range contents {
			if path.Base(p) == name {
				return data, nil
			}
		}
		return nil, fmt.Errorf("package %s (%s) has no %s", pkg, deb, name)
	}
	var out []file
	for _, n := range append([]string{loader}, libcFiles...) {
		data, err := find(n)
		if err != nil {
			return nil, "", err
		}
		out = append(out, file{name: libDir + "/" + n, mode: 0o755, data: data})
	}
	// The loader where the ELF interpreter field names it.
	out = append(out, file{name: loaderDir + "/" + loader, link: "/" + libDir + "/" + loader})
	return out, strings.TrimSpace(string(version)), nil
}

// download fetches a Debian package's .deb into dir with apt-get
// download, once.
func download(ctx context.Context, dir, pkg string) (string, error) {
	if m, _ := filepath.Glob(filepath.Join(dir, pkg+"_*.deb")); len(m) == 1 {
		return m[0], nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	get := func() ([]byte, error) {
		cmd := exec.CommandContext(ctx, "apt-get", "download", pkg)
		cmd.Dir = dir
		return cmd.CombinedOutput()
	}
	b, err := get()
	if err != nil && os.Geteuid() == 0 {
		// A fresh machine has no package index yet.
		if up, uerr := exec.CommandContext(ctx, "apt-get", "update").CombinedOutput(); uerr != nil {
			return "", fmt.Errorf("apt-get download %s: %w\n%s\napt-get update: %w\n%s", pkg, err, b, uerr, up)
		}
		b, err = get()
	}
	if err != nil {
		return "", fmt.Errorf("apt-get download %s (Debian's package index may need `apt-get update`, as root): %w\n%s", pkg, err, b)
	}
	m, _ := filepath.Glob(filepath.Join(dir, pkg+"_*.deb"))
	if len(m) != 1 {
		return "", fmt.Errorf("apt-get download %s left %d packages in %s", pkg, len(m), dir)
	}
	return m[0], nil
}

// maxLibBytes bounds a library read from a package.
const maxLibBytes = 64 << 20

// debFiles reads the regular files of a .deb's data, resolving symlinks
// within it.
func debFiles(ctx context.Context, deb string) (map[string][]byte, error) {
	out, err := exec.CommandContext(ctx, "dpkg-deb", "--fsys-tarfile", deb).Output()
	if err != nil {
		return nil, fmt.Errorf("dpkg-deb --fsys-tarfile %s: %w", deb, err)
	}
	files := map[string][]byte{}
	links := map[string]string{}
	tr := tar.NewReader(bytes.NewReader(out))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", deb, err)
		}
		name := path.Clean("/" + h.Name)
		switch h.Typeflag {
		case tar.TypeReg:
			if h.Size > maxLibBytes {
				continue
			}
			data, err := io.ReadAll(io.LimitReader(tr, maxLibBytes))
			if err != nil {
				return nil, err
			}
			files[name] = data
		case tar.TypeSymlink:
			target := h.Linkname
			if !path.IsAbs(target) {
				target = path.Join(path.Dir(name), target)
			}
			links[name] = target
		}
	}
	for l, target := range links {
		if data, ok := files[target]; ok {
			files[l] = data
		}
	}
	return files, nil
}

// checkNeeded fails when the binary needs a library the image lacks.
func checkNeeded(bin string, libs []file) error {
	f, err := elf.Open(bin)
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }()
	needed, err := f.ImportedLibraries()
	if err != nil {
		return err
	}
	for _, n := range needed {
		if !slices.ContainsFunc(libs, func(l file) bool { return path.Base(l.name) == n }) {
			return fmt.Errorf("%s needs %s, which the image does not carry", filepath.Base(bin), n)
		}
	}
	return nil
}

// LoadLayout returns the indexes of a layout by reference.
func LoadLayout(dir string) (map[string]v1.ImageIndex, error) {
	lp, err := layout.FromPath(dir)
	if err != nil {
		return nil, fmt.Errorf("reading the OCI layout %s (run `make images` first): %w", dir, err)
	}
	root, err := lp.ImageIndex()
	if err != nil {
		return nil, err
	}
	m, err := root.IndexManifest()
	if err != nil {
		return nil, err
	}
	out := map[string]v1.ImageIndex{}
	for _, d := range m.Manifests {
		ref := d.Annotations[RefNameAnnotation]
		if ref == "" {
			continue
		}
		ii, err := root.ImageIndex(d.Digest)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", ref, err)
		}
		out[ref] = ii
	}
	return out, nil
}
