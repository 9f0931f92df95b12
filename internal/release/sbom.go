package release

import (
	"bytes"
	"debug/buildinfo"
	"fmt"
	"os"
	"sort"
	"time"

	cdx "github.com/CycloneDX/cyclonedx-go"
)

// writeSBOM writes a CycloneDX JSON SBOM of the binaries (command name to
// path) at path: gpuplane as the described component, each binary an
// application in it with its SHA-256, each Go module any of them links a
// library, and which binary links which module as dependencies. Modules
// come from the build info the Go toolchain recorded in each binary.
func writeSBOM(path, version string, date time.Time, bins map[string]string) error {
	bom := cdx.NewBOM()
	bom.SerialNumber = "" // a serial number would differ per run; the content names the release
	root := cdx.Component{BOMRef: "pkg:golang/github.com/gpuplane/gpuplane@" + version, Type: cdx.ComponentTypeApplication,
		Name: "gpuplane", Version: version, PackageURL: "pkg:golang/github.com/gpuplane/gpuplane@" + version,
		Licenses: &cdx.Licenses{{License: &cdx.License{ID: "Apache-2.0"}}}}
	bom.Metadata = &cdx.Metadata{Timestamp: date.UTC().Format(time.RFC3339), Component: &root,
		Tools: &cdx.ToolsChoice{Components: &[]cdx.Component{{Type: cdx.ComponentTypeLibrary, Name: "cyclonedx-go", Group: "github.com/CycloneDX"}}}}

	names := make([]string, 0, len(bins))
	for n := range bins {
		names = append(names, n)
	}
	sort.Strings(names)
	modules := map[string]cdx.Component{}
	var apps []cdx.Component
	deps := []cdx.Dependency{}
	var appRefs []string
	for _, n := range names {
		info, err := buildinfo.ReadFile(bins[n])
		if err != nil {
			return fmt.Errorf("reading the build info of %s: %w", n, err)
		}
		sum, err := fileSHA256(bins[n])
		if err != nil {
			return err
		}
		ref := "binary:" + n
		apps = append(apps, cdx.Component{BOMRef: ref, Type: cdx.ComponentTypeApplication, Name: n, Version: version,
			Hashes:     &[]cdx.Hash{{Algorithm: cdx.HashAlgoSHA256, Value: sum}},
			Properties: &[]cdx.Property{{Name: "gpuplane:go-version", Value: info.GoVersion}, {Name: "gpuplane:platform", Value: platformOf(info)}}})
		appRefs = append(appRefs, ref)
		var linked []string
		for _, d := range info.Deps {
			m := d
			if d.Replace != nil {
				m = d.Replace
			}
			purl := fmt.Sprintf("pkg:golang/%s@%s", m.Path, m.Version)
			if _, ok := modules[purl]; !ok {
				c := cdx.Component{BOMRef: purl, Type: cdx.ComponentTypeLibrary, Name: m.Path, Version: m.Version, PackageURL: purl}
				if m.Sum != "" {
					c.Properties = &[]cdx.Property{{Name: "gpuplane:go-sum", Value: m.Sum}}
				}
				modules[purl] = c
			}
			linked = append(linked, purl)
		}
		sort.Strings(linked)
		deps = append(deps, cdx.Dependency{Ref: ref, Dependencies: &linked})
	}
	refs := make([]string, 0, len(modules))
	for r := range modules {
		refs = append(refs, r)
	}
	sort.Strings(refs)
	comps := apps
	for _, r := range refs {
		comps = append(comps, modules[r])
	}
	bom.Components = &comps
	deps = append([]cdx.Dependency{{Ref: root.BOMRef, Dependencies: &appRefs}}, deps...)
	bom.Dependencies = &deps

	var buf bytes.Buffer
	enc := cdx.NewBOMEncoder(&buf, cdx.BOMFileFormatJSON)
	enc.SetPretty(true)
	if err := enc.Encode(bom); err != nil {
		return fmt.Errorf("encoding: %w", err)
	}
	return os.WriteFile(path, buf.Bytes(), 0o644)
}

func platformOf(info *buildinfo.BuildInfo) string {
	var goos, goarch string
	for _, s := range info.Settings {
		switch s.Key {
		case "GOOS":
			goos = s.Value
		case "GOARCH":
			goarch = s.Value
		}
	}
	return goos + "/" + goarch
}
