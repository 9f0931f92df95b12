// Command release builds gpuplane's release artifacts (internal/release)
// into a directory. `make release` runs it.
//
//	go run ./hack/release --out dist --version v0.1.0 --commit $(git rev-parse HEAD) --date 2026-11-27T18:02:11Z --images
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/gpuplane/gpuplane/internal/imagebuild"
	"github.com/gpuplane/gpuplane/internal/release"
)

func main() {
	fs := flag.NewFlagSet("release", flag.ExitOnError)
	out := fs.String("out", "dist", "directory to write")
	version := fs.String("version", "", "the release's version (v1.2.3; git describe)")
	commit := fs.String("commit", "", "the commit built")
	date := fs.String("date", "", "the commit's time, RFC 3339")
	platforms := fs.String("platforms", strings.Join(release.Platforms, ","), "platforms of the CLI archives, comma-separated")
	download := fs.String("download-url", "", "where the archives are published, for the krew manifest (default: the GitHub release of --version)")
	images := fs.Bool("images", false, "also build the images, one OCI archive each")
	registry := fs.String("registry", "ghcr.io/gpuplane", "registry and repository prefix that names the images")
	imagePlatforms := fs.String("image-platforms", strings.Join(imagebuild.Platforms, ","), "platforms of the images, comma-separated")
	workDir := fs.String("work-dir", "bin/.images", "directory for image builds and Debian packages, kept between runs")
	_ = fs.Parse(os.Args[1:])
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "release: unexpected argument %q\n", fs.Arg(0))
		os.Exit(2)
	}
	when, err := time.Parse(time.RFC3339, *date)
	if err != nil {
		fmt.Fprintf(os.Stderr, "release: --date %q: want RFC 3339 (2026-11-27T18:02:11Z): %v\n", *date, err)
		os.Exit(2)
	}
	if *download == "" {
		*download = "https://github.com/gpuplane/gpuplane/releases/download/" + *version
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	r, err := release.Build(ctx, release.Options{
		Module: ".", Out: *out, Version: *version, Commit: *commit, Date: when,
		Platforms: split(*platforms), DownloadURL: *download, Images: *images,
		Image: imagebuild.Options{Registry: *registry, Platforms: split(*imagePlatforms), WorkDir: *workDir},
		Log:   log,
	})
	if err != nil {
		fmt.Fprintf(os.Stderr, "release: %v\n", err)
		os.Exit(1)
	}
	for _, f := range append(append(append([]string{}, r.Archives...), r.SBOM, r.Krew), append(r.Images, r.Checksums)...) {
		fmt.Println(*out + "/" + f)
	}
}

func split(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
