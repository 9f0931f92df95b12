package gpupod_test

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/gpuplane/gpuplane/api/gpupod"
)

func TestGPUsRoundTrip(t *testing.T) {
	tests := []struct {
		text   string
		choice []gpupod.GPUChoice
	}{
		{"0,1", []gpupod.GPUChoice{{Index: 0}, {Index: 1}}},
		{"3:250", []gpupod.GPUChoice{{Index: 3, Milli: 250}}},
		{"2:m3", []gpupod.GPUChoice{{Index: 2, MIGSlices: 3}}},
		{"7,0:m1,5:999", []gpupod.GPUChoice{{Index: 7}, {Index: 0, MIGSlices: 1}, {Index: 5, Milli: 999}}},
	}
	for _, tc := range tests {
		got, err := gpupod.ParseGPUs(tc.text, 8)
		if err != nil || !slices.Equal(got, tc.choice) {
			t.Errorf("ParseGPUs(%q) = %+v, %v; want %+v", tc.text, got, err, tc.choice)
		}
		if s := gpupod.FormatGPUs(tc.choice); s != tc.text {
			t.Errorf("FormatGPUs(%+v) = %q, want %q", tc.choice, s, tc.text)
		}
	}
}

func TestParseGPUsRefuses(t *testing.T) {
	for text, want := range map[string]string{
		"8":                          "not one of the node's 8 GPUs",
		"-1":                         "not one of the node's 8 GPUs",
		"x":                          "not one of the node's 8 GPUs",
		"1,1":                        "named twice",
		"1:0":                        "must be 1 to 999",
		"1:1000":                     "a whole GPU has no share",
		"1:m8":                       "must be 1 to 7",
		"1:m":                        "must be 1 to 7",
		"0,1,2,3,4,5,6,7,0":          "9 GPUs named",
		strings.Repeat("1,", 100000): "GPUs named",
	} {
		_, err := gpupod.ParseGPUs(text, 8)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseGPUs(%.20q) error %v, want one saying %q", text, err, want)
		}
	}
}

func FuzzParseGPUs(f *testing.F) {
	for _, s := range []string{"0,1", "1:250", "2:m3", "0:-5000", "0:m99", "0,0", "7", "x", "1:1001", "", ",", "1:"} {
		f.Add(s, 4)
	}
	f.Fuzz(func(t *testing.T, s string, gpus int) {
		gpus = gpus % 100
		choice, err := gpupod.ParseGPUs(s, gpus)
		if err != nil {
			return
		}
		seen := map[int]bool{}
		for _, c := range choice {
			if c.Index < 0 || c.Index >= gpus || seen[c.Index] || c.Milli < 0 || c.Milli >= gpupod.MilliPerGPU ||
				c.MIGSlices < 0 || c.MIGSlices > gpupod.MaxMIGSlices || (c.Milli > 0 && c.MIGSlices > 0) {
				t.Fatalf("ParseGPUs(%q, %d) = %+v", s, gpus, choice)
			}
			seen[c.Index] = true
		}
		back, err := gpupod.ParseGPUs(gpupod.FormatGPUs(choice), gpus)
		if err != nil || !slices.Equal(back, choice) {
			t.Fatalf("round trip of %q through %q: %v, %+v", s, gpupod.FormatGPUs(choice), err, back)
		}
	})
}

func FuzzReadFraction(f *testing.F) {
	f.Add("0.25", "20Gi", "3000", "30", "50", "0.5", "2000")
	f.Add("", "", "", "", "", "NaN", "-1")
	f.Add("1e400", "1e30", "1e30", "101", "0", "1", "99999999999")
	f.Add("-0", "0", "-5", "-5", "-5", "0x1p-2", " 7 ")
	f.Fuzz(func(t *testing.T, fraction, memory, hamiMem, hamiCores, hamiPct, kaiFraction, kaiMem string) {
		ann := map[string]string{}
		for k, v := range map[string]string{gpupod.FractionAnnotation: fraction, gpupod.MemoryAnnotation: memory, gpupod.KAIFraction: kaiFraction, gpupod.KAIMemory: kaiMem} {
			if v != "" {
				ann[k] = v
			}
		}
		reqs := corev1.ResourceList{}
		for name, v := range map[corev1.ResourceName]string{gpupod.HAMiMemory: hamiMem, gpupod.HAMiCores: hamiCores, gpupod.HAMiMemoryPercentage: hamiPct} {
			if q, err := resource.ParseQuantity(v); err == nil {
				reqs[name] = q
			}
		}
		fr, ok, err := gpupod.ReadFraction(ann, reqs)
		if err != nil || !ok {
			return
		}
		if fr.Milli < 0 || fr.Milli > gpupod.MilliPerGPU || fr.MemoryMiB < 0 || fr.MemoryMiB > gpupod.MaxFractionMemoryMiB || (fr.Milli == 0 && fr.MemoryMiB == 0) {
			t.Fatalf("ReadFraction(%v, %v) = %+v", ann, reqs, fr)
		}
	})
}

func TestComputeMilli(t *testing.T) {
	choice, err := gpupod.ParseGPUs("0,1:250,2:m3", 8)
	if err != nil {
		t.Fatal(err)
	}
	var got []int64
	for _, c := range choice {
		got = append(got, c.ComputeMilli())
	}
	if !slices.Equal(got, []int64{1000, 250, 0}) {
		t.Errorf("ComputeMilli of a whole GPU, a quarter and a MIG instance: %v, want [1000 250 0]", got)
	}
}
