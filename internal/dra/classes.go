package dra

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"

	configv1 "github.com/gpuplane/gpuplane/api/config/v1"
	apidra "github.com/gpuplane/gpuplane/api/dra"
)

// DeviceClass names that do not depend on the config.
const (
	// ClassGPU is every whole GPU.
	ClassGPU = apidra.DriverName
	// ClassMIG is every MIG device, whatever its profile.
	ClassMIG = "mig." + apidra.DriverName
)

// CommonMIGProfiles are the MIG profiles of the GPUs gpuplane knows
// (A100 40/80GB, A30, H100, H200, B200) that make a resource name, for a
// chart that cannot ask the node which it has.
var CommonMIGProfiles = []string{
	"1g.5gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb",
	"1g.6gb", "2g.12gb", "4g.24gb",
	"1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb",
	"1g.18gb", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb",
	"1g.23gb", "1g.45gb", "2g.45gb", "3g.90gb", "4g.90gb", "7g.180gb",
}

// DeviceClasses are the classes that let pods ask for gpuplane's devices:
// claims name them, and their extendedResourceName lets a pod that asks
// for nvidia.com/gpu or nvidia.com/mig-<profile> be served through DRA on
// a node whose device plugin does not advertise that resource. They follow
// the device plugin's config, so that the same resource names mean the same
// devices: renamed GPUs (resources.gpus) get a class each selecting their
// product names, MIG profiles (resources.mig or the profiles given) a class
// each, and every time-slicing or MPS resource a class whose opaque config
// asks for that sharing. Classes of shared resources carry no
// extendedResourceName: a DRA claim gives its pods the whole device, so
// nvidia.com/gpu.shared replicas have no DRA meaning; name the class in a
// claim instead, and let several pods share the claim.
func DeviceClasses(cfg *configv1.Config, migProfiles []string) ([]*resourceapi.DeviceClass, error) {
	var out []*resourceapi.DeviceClass
	ext := map[string]string{}
	add := func(name, cel, extended string, config *apidra.DeviceConfig) error {
		if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
			return fmt.Errorf("DeviceClass name %q: %s", name, strings.Join(errs, "; "))
		}
		c := &resourceapi.DeviceClass{
			TypeMeta:   metav1.TypeMeta{APIVersion: resourceapi.SchemeGroupVersion.String(), Kind: "DeviceClass"},
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app.kubernetes.io/part-of": "gpuplane"}},
			Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
				Expression: fmt.Sprintf("device.driver == %q && %s", apidra.DriverName, cel),
			}}}},
		}
		if extended != "" && len(validation.IsQualifiedName(extended)) == 0 {
			if other, dup := ext[extended]; dup {
				return fmt.Errorf("DeviceClasses %s and %s would both serve %s", other, name, extended)
			}
			ext[extended] = name
			c.Spec.ExtendedResourceName = ptr.To(extended)
		}
		if config != nil {
			raw, err := jsonMarshal(config)
			if err != nil {
				return err
			}
			c.Spec.Config = []resourceapi.DeviceClassConfiguration{{DeviceConfiguration: resourceapi.DeviceConfiguration{
				Opaque: &resourceapi.OpaqueDeviceConfiguration{Driver: apidra.DriverName, Parameters: runtime.RawExtension{Raw: raw}},
			}}}
		}
		out = append(out, c)
		return nil
	}
	typeIs := func(t string) string {
		return fmt.Sprintf("device.attributes[%q].%s == %q", apidra.DriverName, apidra.AttrType, t)
	}
	attr := func(a string) string { return fmt.Sprintf("device.attributes[%q].%s", apidra.DriverName, a) }

	// Whole GPUs: the default resource, or one per renamed product.
	gpuExt := configv1.DefaultResourceName
	if len(cfg.Resources.GPUs) > 0 {
		gpuExt = ""
	}
	if err := add(ClassGPU, typeIs(apidra.TypeGPU), gpuExt, nil); err != nil {
		return nil, err
	}
	for _, r := range cfg.Resources.GPUs {
		short := shortName(r.Name)
		if err := add(short+"."+apidra.DriverName, typeIs(apidra.TypeGPU)+" && "+attr(apidra.AttrProductName)+".matches("+celString(globRegexp(r.Pattern))+")", r.Name, nil); err != nil {
			return nil, err
		}
	}
	// MIG devices: all, then one class per profile.
	if err := add(ClassMIG, typeIs(apidra.TypeMIG), "", nil); err != nil {
		return nil, err
	}
	named := map[string]string{}
	for _, r := range cfg.Resources.MIGs {
		named[r.Pattern] = r.Name
	}
	profiles := slices.Clone(migProfiles)
	for p := range named {
		if !slices.Contains(profiles, p) {
			profiles = append(profiles, p)
		}
	}
	for _, p := range profiles {
		res := "nvidia.com/mig-" + p
		if n, ok := named[p]; ok {
			res = n
		}
		name := "mig-" + strings.NewReplacer("+", "-").Replace(p) + "." + apidra.DriverName
		if err := add(name, typeIs(apidra.TypeMIG)+" && "+attr(apidra.AttrMIGProfile)+" == "+celString(p), res, nil); err != nil {
			return nil, err
		}
	}
	// Shared resources: a class per sharing with its config.
	for _, mode := range []struct {
		rs       configv1.ReplicatedResources
		strategy string
	}{{cfg.Sharing.TimeSlicing, apidra.StrategyTimeSlicing}, {cfg.Sharing.MPS, apidra.StrategyMPS}} {
		for _, r := range mode.rs.Resources {
			kind, sel := apidra.KindGpuConfig, typeIs(apidra.TypeGPU)
			if strings.HasPrefix(shortName(r.Name), "mig-") {
				if mode.strategy == apidra.StrategyTimeSlicing {
					continue // MIG devices cannot be time-sliced under DRA
				}
				kind, sel = apidra.KindMigDeviceConfig, typeIs(apidra.TypeMIG)+" && "+attr(apidra.AttrMIGProfile)+" == "+celString(strings.TrimPrefix(shortName(r.Name), "mig-"))
			}
			name := shortName(cmpOr(r.Rename, r.Name)) + "-" + strings.ToLower(mode.strategy) + "." + apidra.DriverName
			cfg := &apidra.DeviceConfig{APIVersion: apidra.ConfigAPIVersion, Kind: kind, Sharing: &apidra.Sharing{Strategy: mode.strategy}}
			if err := add(name, sel, "", cfg); err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// shortName is a resource name without its domain, lower case.
func shortName(res string) string {
	if i := strings.LastIndex(res, "/"); i >= 0 {
		res = res[i+1:]
	}
	return strings.ToLower(res)
}

// globRegexp turns a config pattern ("*A100*") into an anchored regular
// expression.
func globRegexp(glob string) string {
	var b strings.Builder
	b.WriteString("^")
	for _, part := range strings.Split(glob, "*") {
		b.WriteString(regexp.QuoteMeta(part))
		b.WriteString(".*")
	}
	s := strings.TrimSuffix(b.String(), ".*")
	return s + "$"
}

// celString quotes s as a CEL string literal.
func celString(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s) + "'"
}
