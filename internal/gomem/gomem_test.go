package gomem

import (
	"math"
	"os"
	"path/filepath"
	"runtime/debug"
	"testing"
)

func TestCgroupLimit(t *testing.T) {
	for _, c := range []struct {
		name, file, content string
		want                int64
		wantErr             bool
	}{
		{name: "v2 limit", file: "memory.max", content: "2147483648\n", want: 2 << 30},
		{name: "v2 no limit", file: "memory.max", content: "max\n"},
		{name: "v1 limit", file: "memory/memory.limit_in_bytes", content: "536870912\n", want: 512 << 20},
		{name: "v1 no limit", file: "memory/memory.limit_in_bytes", content: "9223372036854771712\n"},
		{name: "garbage", file: "memory.max", content: "lots", wantErr: true},
		{name: "negative", file: "memory.max", content: "-1", wantErr: true},
		{name: "no cgroup"},
	} {
		t.Run(c.name, func(t *testing.T) {
			root := t.TempDir()
			if c.file != "" {
				p := filepath.Join(root, c.file)
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, []byte(c.content), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			got, _, err := CgroupLimit(root)
			if (err != nil) != c.wantErr || got != c.want {
				t.Errorf("CgroupLimit = %d, %v; want %d, error %v", got, err, c.want, c.wantErr)
			}
		})
	}
}

func TestApply(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(math.MaxInt64))
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, "memory.max"), []byte("1000000000\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{}
	getenv := func(k string) string { return env[k] }

	s, err := Apply(getenv, root, 50)
	if err != nil || s.GCPercent != 50 || s.GCFromEnv || s.Limit != 900000000 || s.LimitFrom != filepath.Join(root, "memory.max") {
		t.Errorf("Apply = %+v, %v; want GOGC 50 and 90%% of the cgroup's limit", s, err)
	}
	if got := debug.SetMemoryLimit(-1); got != 900000000 {
		t.Errorf("runtime memory limit = %d, want 900000000", got)
	}

	// The environment wins: the runtime already read it.
	env["GOGC"], env["GOMEMLIMIT"] = "200", "1GiB"
	debug.SetGCPercent(200)
	debug.SetMemoryLimit(1 << 30)
	s, err = Apply(getenv, root, 50)
	if err != nil || s.GCPercent != 200 || !s.GCFromEnv || s.Limit != 1<<30 || s.LimitFrom != "GOMEMLIMIT" {
		t.Errorf("Apply with GOGC and GOMEMLIMIT set = %+v, %v; want them left as set", s, err)
	}

	// No cgroup limit: no soft limit.
	debug.SetMemoryLimit(math.MaxInt64)
	s, err = Apply(func(string) string { return "" }, t.TempDir(), 50)
	if err != nil || s.Limit != math.MaxInt64 || s.LimitFrom != "" {
		t.Errorf("Apply outside a container = %+v, %v; want no limit", s, err)
	}
}

func FuzzCgroupLimit(f *testing.F) {
	for _, s := range []string{"max\n", "2147483648\n", "9223372036854771712", "", "-5", "1e9"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, content string) {
		root := t.TempDir()
		if err := os.WriteFile(filepath.Join(root, "memory.max"), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		n, _, err := CgroupLimit(root)
		if n < 0 || n >= maxLimit || (err != nil && n != 0) {
			t.Fatalf("CgroupLimit(%q) = %d, %v", content, n, err)
		}
	})
}
