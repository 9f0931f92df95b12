package sim

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gpuplane/gpuplane/internal/gpu"
)

func TestControlHandler(t *testing.T) {
	b, _ := newTestBackend(t, "dgxh100")
	srv := httptest.NewServer(b.ControlHandler())
	defer srv.Close()
	sub, err := b.Subscribe(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Close() }()
	post := func(path string) (int, string) {
		t.Helper()
		resp, err := http.Post(srv.URL+path, "", nil)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = resp.Body.Close() }()
		var sb strings.Builder
		buf := make([]byte, 4096)
		n, _ := resp.Body.Read(buf)
		sb.Write(buf[:n])
		return resp.StatusCode, sb.String()
	}
	tests := []struct {
		name, path string
		code       int
		says       string
	}{
		{"xid", "/xid?gpu=3&xid=79", 200, "ok"},
		{"xid without gpu", "/xid?xid=79", 400, `gpu: want a whole number from 0 to 1024, got ""`},
		{"xid zero", "/xid?gpu=1&xid=0", 400, "xid: want a whole number"},
		{"xid on a GPU the node lacks", "/xid?gpu=8&xid=79", 404, "not found"},
		{"fail reset", "/fail?op=ResetGPU&gpu=3&message=stuck", 200, "ok"},
		{"fail an unknown call", "/fail?op=Explode&gpu=3", 409, `unknown call "Explode"`},
		{"fail creating one profile", "/fail?op=CreateGPUInstance&gpu=2&profile=3g.40gb&message=refused", 200, "ok"},
		{"fail the next creation", "/fail?op=CreateComputeInstance&gpu=2&times=1", 200, "ok"},
		{"fail creating an unknown profile", "/fail?op=CreateGPUInstance&gpu=2&profile=9g.1tb", 404, `profile "9g.1tb"`},
		{"times on a call that is no creation", "/fail?op=ResetGPU&gpu=2&times=2", 409, "want CreateGPUInstance or CreateComputeInstance"},
		{"times zero", "/fail?op=CreateGPUInstance&gpu=2&times=0", 400, "times: want a whole number from 1"},
		{"lose", "/lose?gpu=5", 200, "ok"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, body := post(tc.path)
			if code != tc.code || !strings.Contains(body, tc.says) {
				t.Fatalf("POST %s = %d %q, want %d containing %q", tc.path, code, body, tc.code, tc.says)
			}
		})
	}
	ev := <-sub.Events()
	if ev.Kind != gpu.EventXID || ev.Index != 3 || ev.XID != 79 {
		t.Fatalf("event = %+v, want XID 79 on GPU 3", ev)
	}
	if err := b.ResetGPU(context.Background(), 3); err == nil || !strings.Contains(err.Error(), "stuck") {
		t.Fatalf("ResetGPU after /fail = %v", err)
	}
	var s gpu.Sample
	if err := b.Sample(context.Background(), 5, &s); !errors.Is(err, gpu.ErrGPULost) {
		t.Fatalf("GPU 5 after /lose: %v", err)
	}
	if code, _ := post("/clear"); code != 200 {
		t.Fatal("clear failed")
	}
	if err := b.ResetGPU(context.Background(), 3); err != nil {
		t.Fatalf("ResetGPU after /clear = %v", err)
	}
	resp, err := http.Get(srv.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("GET / = %d", resp.StatusCode)
	}
}
