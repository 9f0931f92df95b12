package release

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"debug/elf"
	"debug/macho"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	cdx "github.com/CycloneDX/cyclonedx-go"
	"sigs.k8s.io/yaml"
)

const testVersion = "v0.0.0-test.1"

var testDate = time.Date(2026, 11, 27, 18, 2, 11, 0, time.UTC)

// TestRelease builds the release without the images (the images tier
// builds and runs those) for two platforms, the host's and darwin/arm64 (a
// cross build without cgo of the other system and architecture; make
// release builds all four the same way), and checks what a user and krew
// get: each archive holds the CLI, LICENSE and README.md, the host's
// CLI runs and prints its stamped version, the others are built for their
// platform without cgo, checksums.txt matches every file, the SBOM parses
// and lists each binary's modules, and the krew manifest's SHA-256 match
// the archives. It compiles the CLI for two platforms, so it runs only with
// GPUPLANE_RELEASE_TEST=1 (make test-release, part of make test).
func TestRelease(t *testing.T) {
	if os.Getenv("GPUPLANE_RELEASE_TEST") != "1" {
		t.Skip("builds the release: set GPUPLANE_RELEASE_TEST=1 (make test-release)")
	}
	module := moduleRoot(t)
	out := t.TempDir()
	platforms := []string{runtime.GOOS + "/" + runtime.GOARCH, "darwin/arm64"}
	if runtime.GOOS == "darwin" {
		platforms[1] = "linux/amd64"
	}
	r, err := Build(context.Background(), Options{Module: module, Out: out, Version: testVersion, Commit: "0123abcd",
		Date: testDate, DownloadURL: "https://downloads.example/gpuplane/" + testVersion, Platforms: platforms})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Archives) != len(platforms) {
		t.Fatalf("archives %v, want one per platform of %v", r.Archives, platforms)
	}
	license, err := os.ReadFile(filepath.Join(module, "LICENSE"))
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range platforms {
		goos, goarch, _ := strings.Cut(p, "/")
		name := r.Archives[i]
		if want := "gpuplane_" + testVersion + "_" + goos + "_" + goarch + ".tar.gz"; name != want {
			t.Errorf("archive %d is %s, want %s", i, name, want)
		}
		files := readArchive(t, filepath.Join(out, name))
		if len(files) != 3 || files["gpuplane"] == nil || !bytes.Equal(files["LICENSE"], license) || len(files["README.md"]) == 0 {
			t.Errorf("%s holds %v, want gpuplane, LICENSE and README.md", name, keys(files))
			continue
		}
		checkBinary(t, name, files["gpuplane"], goos, goarch)
		if goos == runtime.GOOS && goarch == runtime.GOARCH {
			bin := filepath.Join(t.TempDir(), "gpuplane")
			if err := os.WriteFile(bin, files["gpuplane"], 0o755); err != nil {
				t.Fatal(err)
			}
			got := run(t, bin, "--version")
			if want := "gpuplane " + testVersion + " (commit 0123abcd, date 2026-11-27T18:02:11Z, go"; !strings.HasPrefix(got, want) {
				t.Errorf("the released CLI's --version printed %q, want it to start with %q", got, want)
			}
			run(t, bin, "version", "--client", "-o", "json")
		}
	}
	checkChecksums(t, out, r)
	checkSBOM(t, filepath.Join(out, r.SBOM))
	checkKrew(t, out, r, platforms)
}

// TestPlainBuildsStart builds each binary as `go build` and `go install`
// do, with no flags, tags or GOFLAGS, and runs it with --help and
// --version on a machine without NVIDIA's library: a binary that binds
// NVML's symbols at start dies here with a symbol lookup error.
func TestPlainBuildsStart(t *testing.T) {
	if os.Getenv("GPUPLANE_RELEASE_TEST") != "1" {
		t.Skip("builds the three binaries: set GPUPLANE_RELEASE_TEST=1 (make test-release)")
	}
	if out, err := exec.Command("ldconfig", "-p").Output(); err == nil && bytes.Contains(out, []byte("libnvidia-ml.so")) {
		t.Skip("this machine has NVIDIA's management library; the check needs one without it")
	}
	module := moduleRoot(t)
	dir := t.TempDir()
	for _, c := range Commands {
		t.Run(c, func(t *testing.T) {
			bin := filepath.Join(dir, c)
			cmd := exec.Command("go", "build", "-o", bin, "./cmd/"+c)
			cmd.Dir = module
			cmd.Env = append(withoutEnv("GOFLAGS", "CGO_ENABLED", "LD_LIBRARY_PATH"), "GOFLAGS=")
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("go build ./cmd/%s: %v\n%s", c, err, out)
			}
			run(t, bin, "--help")
			if got := run(t, bin, "--version"); !strings.HasPrefix(got, c+" ") {
				t.Errorf("%s --version printed %q", c, got)
			}
		})
	}
}

func withoutEnv(names ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		drop := false
		for _, n := range names {
			drop = drop || k == n
		}
		if !drop {
			env = append(env, kv)
		}
	}
	return env
}

func run(t *testing.T, bin string, args ...string) string {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = withoutEnv("LD_LIBRARY_PATH", "KUBECONFIG")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Errorf("%s %s: %v\n%s", filepath.Base(bin), strings.Join(args, " "), err, out)
	}
	return string(out)
}

func readArchive(t *testing.T, path string) map[string][]byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	tr := tar.NewReader(gz)
	files := map[string][]byte{}
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if h.Typeflag != tar.TypeReg || !h.ModTime.Equal(testDate) || h.Uid != 0 {
			t.Errorf("%s: entry %s: type %c, time %s, uid %d; want a regular file of the commit's time owned by root", path, h.Name, h.Typeflag, h.ModTime, h.Uid)
		}
		if h.Name == "gpuplane" && h.Mode&0o111 == 0 {
			t.Errorf("%s: the CLI is not executable (mode %o)", path, h.Mode)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		files[h.Name] = b
	}
	return files
}

// checkBinary checks the CLI's object format and machine, and that a
// Linux build has no dynamic loader (built without cgo).
func checkBinary(t *testing.T, archive string, b []byte, goos, goarch string) {
	t.Helper()
	switch goos {
	case "linux":
		f, err := elf.NewFile(bytes.NewReader(b))
		if err != nil {
			t.Errorf("%s: not an ELF binary: %v", archive, err)
			return
		}
		want := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}[goarch]
		if f.Machine != want {
			t.Errorf("%s: ELF machine %s, want %s", archive, f.Machine, want)
		}
		for _, p := range f.Progs {
			if p.Type == elf.PT_INTERP {
				t.Errorf("%s: the CLI is dynamically linked; it must build without cgo", archive)
			}
		}
	case "darwin":
		f, err := macho.NewFile(bytes.NewReader(b))
		if err != nil {
			t.Errorf("%s: not a Mach-O binary: %v", archive, err)
			return
		}
		want := map[string]macho.Cpu{"amd64": macho.CpuAmd64, "arm64": macho.CpuArm64}[goarch]
		if f.Cpu != want {
			t.Errorf("%s: Mach-O CPU %s, want %s", archive, f.Cpu, want)
		}
	}
}

func checkChecksums(t *testing.T, out string, r *Result) {
	t.Helper()
	f, err := os.Open(filepath.Join(out, r.Checksums))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	listed := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		sum, name, ok := strings.Cut(sc.Text(), "  ")
		if !ok || len(sum) != 64 {
			t.Fatalf("checksums.txt line %q is not sha256sum's", sc.Text())
		}
		listed[name] = sum
	}
	want := append(append([]string{}, r.Archives...), r.SBOM, r.Krew)
	if len(listed) != len(want) {
		t.Errorf("checksums.txt lists %v, want %v", keys(listed), want)
	}
	for _, name := range want {
		got, err := fileSHA256(filepath.Join(out, name))
		if err != nil {
			t.Fatal(err)
		}
		if listed[name] != got {
			t.Errorf("checksums.txt says %s for %s, the file's is %s", listed[name], name, got)
		}
	}
}

func checkSBOM(t *testing.T, path string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var bom cdx.BOM
	if err := cdx.NewBOMDecoder(f, cdx.BOMFileFormatJSON).Decode(&bom); err != nil {
		t.Fatalf("the SBOM does not parse as CycloneDX: %v", err)
	}
	if bom.Metadata == nil || bom.Metadata.Component == nil || bom.Metadata.Component.Name != "gpuplane" || bom.Metadata.Component.Version != testVersion {
		t.Fatalf("SBOM metadata %+v, want gpuplane %s", bom.Metadata, testVersion)
	}
	byRef := map[string]cdx.Component{}
	for _, c := range *bom.Components {
		byRef[c.BOMRef] = c
	}
	for _, c := range Commands {
		b, ok := byRef["binary:"+c]
		if !ok || b.Hashes == nil || len((*b.Hashes)[0].Value) != 64 {
			t.Errorf("SBOM lacks the binary %s with its SHA-256: %+v", c, b)
		}
	}
	links := map[string]map[string]bool{}
	for _, d := range *bom.Dependencies {
		links[d.Ref] = map[string]bool{}
		for _, to := range *d.Dependencies {
			links[d.Ref][to] = true
			if _, ok := byRef[to]; !ok {
				t.Errorf("SBOM dependency %s -> %s names no component", d.Ref, to)
			}
		}
	}
	has := func(bin, module string) bool {
		for to := range links["binary:"+bin] {
			if strings.HasPrefix(to, "pkg:golang/"+module+"@") {
				return true
			}
		}
		return false
	}
	for _, tc := range []struct {
		bin, module string
		want        bool
	}{
		{"gpuplane", "k8s.io/client-go", true},
		{"gpuplane", "github.com/spf13/cobra", true},
		{"gpuplane", "github.com/NVIDIA/go-nvml", false},
		{"gpuplane-agent", "github.com/NVIDIA/go-nvml", true},
		{"gpuplane-scheduler", "k8s.io/client-go", true},
	} {
		if got := has(tc.bin, tc.module); got != tc.want {
			t.Errorf("SBOM says %s links %s: %v, want %v", tc.bin, tc.module, got, tc.want)
		}
	}
}

func checkKrew(t *testing.T, out string, r *Result, platforms []string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(out, r.Krew))
	if err != nil {
		t.Fatal(err)
	}
	var p krewPlugin
	if err := yaml.UnmarshalStrict(b, &p); err != nil {
		t.Fatalf("the krew manifest does not parse: %v\n%s", err, b)
	}
	if p.APIVersion != KrewAPIVersion || p.Kind != "Plugin" || p.Metadata.Name != "gpuplane" || p.Spec.Version != testVersion || p.Spec.ShortDescription == "" {
		t.Errorf("krew manifest header %+v", p)
	}
	if len(p.Spec.Platforms) != len(r.Archives) {
		t.Fatalf("krew manifest has %d platforms for %d archives", len(p.Spec.Platforms), len(r.Archives))
	}
	for i, pl := range p.Spec.Platforms {
		archive := r.Archives[i]
		sum, err := fileSHA256(filepath.Join(out, archive))
		if err != nil {
			t.Fatal(err)
		}
		if pl.SHA256 != sum || pl.URI != "https://downloads.example/gpuplane/"+testVersion+"/"+archive || pl.Bin != "gpuplane" {
			t.Errorf("krew platform %d: %+v; want %s at its URL with SHA-256 %s", i, pl, archive, sum)
		}
		goos, goarch, _ := strings.Cut(platforms[i], "/")
		if pl.Selector.MatchLabels["os"] != goos || pl.Selector.MatchLabels["arch"] != goarch {
			t.Errorf("krew platform %d selects %v, want %s", i, pl.Selector.MatchLabels, platforms[i])
		}
	}
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func moduleRoot(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Dir(strings.TrimSpace(string(out)))
}
