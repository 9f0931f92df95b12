// Command images builds gpuplane's container images without a container
// engine (internal/imagebuild) and pushes them. `make images` and `make
// push` run it.
//
//	go run ./hack/images build --out _output/images --registry ghcr.io/gpuplane --version v0.1.0
//	go run ./hack/images push --layout _output/images --registry registry.example.com/gpuplane
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
	"text/tabwriter"
	"time"

	"github.com/gpuplane/gpuplane/internal/imagebuild"
)

const usage = `usage:
  images build [--out DIR] [--registry R] [--version V] [--platforms linux/amd64,linux/arm64] [--images a,b] [--revision SHA] [--epoch SECONDS] [--work-dir DIR] [--tags T]
  images push  [--layout DIR] [--registry R] [--version V]
`

func main() {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	var err error
	switch os.Args[1] {
	case "build":
		err = build(ctx, os.Args[2:])
	case "push":
		err = push(ctx, os.Args[2:])
	default:
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "images: %v\n", err)
		os.Exit(1)
	}
}

func build(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("images build", flag.ExitOnError)
	out := fs.String("out", "_output/images", "OCI layout directory to write")
	registry := fs.String("registry", "ghcr.io/gpuplane", "registry and repository prefix of the images")
	version := fs.String("version", "v0.1.0", "the images' tag")
	platforms := fs.String("platforms", strings.Join(imagebuild.Platforms, ","), "platforms, comma-separated")
	images := fs.String("images", "", "images to build, comma-separated (default all)")
	revision := fs.String("revision", "", "the commit, for the images' labels")
	epoch := fs.Int64("epoch", 0, "seconds since 1970 stamped on every file and the images (the commit's time)")
	workDir := fs.String("work-dir", "bin/.images", "directory for builds and Debian packages, kept between runs")
	tags := fs.String("tags", "", "go build tags")
	_ = fs.Parse(args)
	o := imagebuild.Options{
		Module: ".", Platforms: split(*platforms), Images: split(*images), Registry: *registry, Version: *version,
		Revision: *revision, Epoch: time.Unix(*epoch, 0).UTC(), WorkDir: *workDir, Out: *out,
		Log: slog.New(slog.NewTextHandler(os.Stderr, nil)),
	}
	if *tags != "" {
		o.GoFlags = []string{"-tags=" + *tags}
	}
	start := time.Now()
	built, err := imagebuild.Build(ctx, o)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "IMAGE\tPLATFORM\tCOMPRESSED\tDIGEST")
	for _, b := range built {
		fmt.Fprintf(tw, "%s/%s:%s\t%s\t%.1f MB\t%s\n", strings.TrimSuffix(*registry, "/"), b.Image, *version, b.Platform, float64(b.Compressed)/1e6, b.Digest)
	}
	_ = tw.Flush()
	fmt.Printf("wrote %s (an OCI layout, one index per image) in %s\n", *out, time.Since(start).Round(100*time.Millisecond))
	return nil
}

func push(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("images push", flag.ExitOnError)
	dir := fs.String("layout", "_output/images", "OCI layout written by build")
	registry := fs.String("registry", "", "registry and repository prefix to push to (default: the layout's)")
	version := fs.String("version", "", "tag to push as (default: the layout's)")
	_ = fs.Parse(args)
	refs, err := imagebuild.Push(ctx, *dir, *registry, *version)
	for _, r := range refs {
		fmt.Println("pushed", r)
	}
	return err
}

func split(s string) []string {
	var out []string
	for p := range strings.SplitSeq(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
