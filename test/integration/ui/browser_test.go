package ui_test

import (
	"bufio"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/gpuplane/gpuplane/test/integration/framework"
)

// ChromiumEnv names the browser binary; without it, chromium on $PATH.
const ChromiumEnv = "GPUPLANE_CHROMIUM"

// chromium finds the browser, skipping the test without one unless
// GPUPLANE_INTEGRATION=1 (make test-integration installs Debian's
// chromium first: make browser-tools).
func chromium(t testing.TB) string {
	t.Helper()
	if p := os.Getenv(ChromiumEnv); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv(framework.RequireEnv) == "1" {
		t.Fatal("no chromium on $PATH: run 'make browser-tools' (Debian's chromium package) or set " + ChromiumEnv)
	}
	t.Skip("no chromium on $PATH: run 'make browser-tools'")
	return ""
}

// browser is one headless Chromium with a fresh profile, and every
// console error, uncaught exception and error log entry its page
// produced.
type browser struct {
	ctx    context.Context
	mu     sync.Mutex
	errors []string
}

func newBrowser(t testing.TB) *browser {
	t.Helper()
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromium(t)),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.UserDataDir(t.TempDir()),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.WindowSize(1440, 900),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	done := make(chan struct{})
	t.Cleanup(func() {
		cancel()
		cancelAlloc()
		<-done
	})
	// The first Run starts the browser; it must not have a timeout.
	if err := chromedp.Do(ctx); err != nil {
		close(done)
		t.Fatalf("starting chromium: %v", err)
	}
	b := &browser{ctx: ctx}
	go func() {
		defer close(done)
		for m, err := range chromedp.Console(ctx) {
			if err != nil {
				return
			}
			if m.Type == chromedp.ConsoleError || m.IsException() {
				b.mu.Lock()
				b.errors = append(b.errors, m.String()+" ("+m.URL+")")
				b.mu.Unlock()
			}
		}
	}()
	return b
}

// consoleErrors returns the errors seen since the last call.
func (b *browser) consoleErrors() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := b.errors
	b.errors = nil
	return out
}

func (b *browser) run(t testing.TB, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 60*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		t.Fatalf("browser: %v", err)
	}
}

// eval evaluates js in the page.
func eval[T any](t testing.TB, b *browser, js string) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 60*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](js))
	if err != nil {
		t.Fatalf("evaluating %s: %v", js, err)
	}
	return v
}

// waitJS polls the boolean expression js in the page every 20 ms until
// it is true, and returns when it was first seen true; the test fails
// after timeout, saying what it waited for.
func (b *browser) waitJS(t testing.TB, timeout time.Duration, what, js string) time.Time {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var last string
	for {
		ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
		ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool](js))
		cancel()
		now := time.Now()
		if err == nil && ok {
			return now
		}
		if err != nil {
			last = err.Error()
		}
		if now.After(deadline) {
			body, _ := chromedp.Run(b.ctx, chromedp.Evaluate[string](`document.querySelector('main').innerText.slice(0, 3000)`))
			t.Fatalf("waiting %s for %s (%s): %s\npage:\n%s", timeout, what, js, last, body)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// clickUntil clicks the first element sel (CSS) matches until js is true,
// for at most timeout: a live update that redraws the page between
// finding the element and clicking it makes the click land on one that is
// gone, so a click that changed nothing is made again.
func (b *browser) clickUntil(t testing.TB, timeout time.Duration, sel, what, js string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
		_, err := chromedp.Run(ctx, chromedp.Click(chromedp.CSS(sel)))
		cancel()
		if err == nil {
			for until := time.Now().Add(time.Second); time.Now().Before(until); time.Sleep(20 * time.Millisecond) {
				ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
				ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool](js))
				cancel()
				if err == nil && ok {
					return
				}
			}
		}
		if time.Now().After(deadline) {
			// One more wait, which fails the test with the page.
			b.waitJS(t, time.Second, what, js)
			return
		}
	}
}

// text is the innerText of the first element sel (CSS) matches.
func (b *browser) text(t testing.TB, sel string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 60*time.Second)
	defer cancel()
	s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
	if err != nil {
		t.Fatalf("reading %s: %v", sel, err)
	}
	return s
}

// screenshot saves the page as dir/name.png when dir is set.
func (b *browser) screenshot(t testing.TB, dir, name string) {
	t.Helper()
	if dir == "" {
		return
	}
	ctx, cancel := context.WithTimeout(b.ctx, 60*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	if err := os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644); err != nil {
		t.Fatal(err)
	}
}

// uiProcess runs `gpuplane ui` on a free loopback port and returns its
// page's URL, once it says where it serves.
func uiProcess(t testing.TB, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, filepath.Join(binDir, "gpuplane"), append([]string{"ui", "--address", "127.0.0.1:0"}, args...)...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		_ = cmd.Wait()
	})
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if rest, ok := strings.CutPrefix(sc.Text(), "gpuplane ui: serving "); ok {
				addr <- strings.Fields(rest)[0]
			}
		}
		_, _ = io.Copy(io.Discard, out)
		close(addr)
	}()
	select {
	case a, ok := <-addr:
		if !ok {
			t.Fatalf("gpuplane ui exited without serving:\n%s", stderr.String())
		}
		return a
	case <-time.After(2 * time.Minute):
		t.Fatalf("gpuplane ui did not say where it serves in 2 minutes:\n%s", stderr.String())
	}
	return ""
}
