package version

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/gpuplane/gpuplane/api/buildinfo"
)

// Stamped with -ldflags -X (LDFlags); empty in a plain go build.
var (
	version string
	commit  string
	date    string
)

// Package is this package's import path, the target of LDFlags' -X.
const Package = "github.com/gpuplane/gpuplane/internal/version"

// clientGo is the module whose version Info reports as the Kubernetes
// client's.
const clientGo = "k8s.io/client-go"

// LDFlags returns the linker flags that stamp version, commit and date
// into a binary (go build -ldflags). Values must not hold spaces.
func LDFlags(version, commit, date string) string {
	var b strings.Builder
	for _, kv := range [][2]string{{"version", version}, {"commit", commit}, {"date", date}} {
		if kv[1] == "" {
			continue
		}
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "-X %s.%s=%s", Package, kv[0], kv[1])
	}
	return b.String()
}

// Get returns the running binary's build.
func Get() buildinfo.Info {
	bi, _ := debug.ReadBuildInfo()
	return get(version, commit, date, bi)
}

// get fills an Info from the stamped values, then from the build info bi
// (nil when the binary has none).
func get(version, commit, date string, bi *debug.BuildInfo) buildinfo.Info {
	i := buildinfo.Info{Version: version, Commit: commit, Date: date,
		GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if bi == nil {
		if i.Version == "" {
			i.Version = "devel"
		}
		return i
	}
	if bi.GoVersion != "" {
		i.GoVersion = bi.GoVersion
	}
	if i.Version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		// go install module@version and go build in a VCS checkout
		// record the module version.
		i.Version = bi.Main.Version
	}
	if i.Version == "" {
		i.Version = "devel"
	}
	var revision, vcsTime string
	modified := false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			revision = s.Value
		case "vcs.time":
			vcsTime = s.Value
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	if i.Commit == "" && revision != "" {
		i.Commit = revision
		if modified {
			i.Commit += "-dirty"
		}
	}
	if i.Date == "" {
		i.Date = vcsTime
	}
	for _, d := range bi.Deps {
		if d.Path != clientGo {
			continue
		}
		i.KubernetesClient = d.Version
		if d.Replace != nil && d.Replace.Version != "" {
			i.KubernetesClient = d.Replace.Version
		}
	}
	return i
}

// String renders i on one line, as --version prints it after the binary's
// name.
func String(i buildinfo.Info) string {
	var b strings.Builder
	b.WriteString(i.Version)
	var parts []string
	if i.Commit != "" {
		parts = append(parts, "commit "+i.Commit)
	}
	if i.Date != "" {
		parts = append(parts, "date "+i.Date)
	}
	parts = append(parts, i.GoVersion)
	if i.KubernetesClient != "" {
		parts = append(parts, "client-go "+i.KubernetesClient)
	}
	if i.Platform != "" {
		parts = append(parts, i.Platform)
	}
	fmt.Fprintf(&b, " (%s)", strings.Join(parts, ", "))
	return b.String()
}
