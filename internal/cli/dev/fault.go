package dev

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpuplane/gpuplane/internal/cliutil"
)

type faultFlags struct {
	gpu       int
	xid       uint64
	lose      bool
	failReset bool
	clear     bool
}

// newFaultCommand is `gpuplane dev fault`: a GPU fault injected into the
// running agent of a simulated node, through the agent's loopback fault
// controls (--simulate-control-addr).
func newFaultCommand(resolve func() (stateDir, error)) *cobra.Command {
	f := &faultFlags{}
	cmd := &cobra.Command{
		Use:   "fault NODE --gpu N (--xid X | --lose | --fail-reset | --clear)",
		Short: "Fail a GPU of a simulated node: an XID, a GPU off the bus, a refused reset",
		Long: `fault injects a GPU fault into the running gpuplane-agent of a simulated node of
the dev cluster, as the driver would report it. The agent's quarantine then
takes the GPU out of service: the GPUQuarantine condition on the Node, the
gpuplane.io/gpu-fault taint for a fault that affects the node (XID 79), the
eviction of the pods on that GPU, a reset and revalidation
('kubectl describe node NODE' shows each step as an event).

  --xid X        the GPU reports XID X (79: fallen off the bus, 48: double-bit ECC error, ...)
  --lose         the GPU falls off the bus: XID 79, and it answers nothing until reset
  --fail-reset   the GPU's resets fail from now on (a GPU the reset does not mend)
  --clear        resets work again`,
		Example: `  gpuplane dev fault gpu-node-5 --gpu 3 --lose
  gpuplane dev fault gpu-node-5 --gpu 3 --xid 48
  gpuplane dev fault gpu-node-5 --gpu 3 --fail-reset`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			d, err := resolve()
			if err != nil {
				return err
			}
			return runFault(cmd.Context(), d, args[0], f, cmd.OutOrStdout())
		},
	}
	cmd.Flags().IntVar(&f.gpu, "gpu", -1, "index of the GPU to fail (0-7 on a DGX)")
	cmd.Flags().Uint64Var(&f.xid, "xid", 0, "report this XID on the GPU")
	cmd.Flags().BoolVar(&f.lose, "lose", false, "the GPU falls off the bus (XID 79)")
	cmd.Flags().BoolVar(&f.failReset, "fail-reset", false, "make the GPU's resets fail")
	cmd.Flags().BoolVar(&f.clear, "clear", false, "make resets work again (undoes --fail-reset on every GPU)")
	return cmd
}

// faultPath turns the flags into a fault control request.
func faultPath(f *faultFlags) (string, error) {
	chosen := 0
	for _, b := range []bool{f.xid != 0, f.lose, f.failReset, f.clear} {
		if b {
			chosen++
		}
	}
	if chosen != 1 {
		return "", cliutil.Usagef("give one of --xid, --lose, --fail-reset and --clear")
	}
	if f.clear {
		return "/clear", nil
	}
	if f.gpu < 0 || f.gpu > 1023 {
		return "", cliutil.Usagef("--gpu: want the index of a GPU of the node (0 to 7 on a DGX), got %d", f.gpu)
	}
	q := url.Values{"gpu": {strconv.Itoa(f.gpu)}}
	switch {
	case f.xid != 0:
		if f.xid > 1<<16 {
			return "", cliutil.Usagef("--xid: %d is not an XID (1 to 65536)", f.xid)
		}
		q.Set("xid", strconv.FormatUint(f.xid, 10))
		return "/xid?" + q.Encode(), nil
	case f.lose:
		return "/lose?" + q.Encode(), nil
	}
	q.Set("op", "ResetGPU")
	q.Set("message", "the simulated driver refused the reset")
	return "/fail?" + q.Encode(), nil
}

func runFault(ctx context.Context, d stateDir, node string, f *faultFlags, out io.Writer) error {
	path, err := faultPath(f)
	if err != nil {
		return err
	}
	st, err := d.readState()
	if errors.Is(err, fs.ErrNotExist) {
		st, err = nil, nil
	}
	if err != nil {
		return err
	}
	if st == nil {
		return &cliutil.UnreachableError{Err: fmt.Errorf("no dev cluster runs from %s: start one with 'gpuplane dev up'", d)}
	}
	addr, ok := st.Faults[node]
	if !ok {
		nodes := make([]string, 0, len(st.Faults))
		for n := range st.Faults {
			nodes = append(nodes, n)
		}
		slices.Sort(nodes)
		return cliutil.Usagef("node %q has no simulated agent in this dev cluster; nodes with one: %s", node, strings.Join(nodes, ", "))
	}
	if host, _, err := net.SplitHostPort(addr); err != nil || !net.ParseIP(host).IsLoopback() {
		return fmt.Errorf("the dev state names %q as %s's fault controls, which is not a loopback address; refusing", addr, node)
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+path, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("reaching the agent of %s (is the dev cluster up? 'gpuplane dev status'): %w", node, err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("the agent of %s refused the fault: %s", node, strings.TrimSpace(string(body)))
	}
	switch {
	case f.clear:
		_, err = fmt.Fprintf(out, "%s: GPU resets work again\n", node)
	case f.failReset:
		_, err = fmt.Fprintf(out, "%s: resets of GPU %d fail from now on\n", node, f.gpu)
	default:
		_, err = fmt.Fprintf(out, "%s: GPU %d failed; follow it with: kubectl describe node %s\n", node, f.gpu, node)
	}
	return err
}

// freeLoopbackAddrs returns n loopback addresses with ports free right
// now, each a different one: every port is held until all are found, so
// the kernel cannot hand the same one out twice, as it may to ports
// asked for one after another.
func freeLoopbackAddrs(n int) ([]string, error) {
	var addrs []string
	var held []net.Listener
	defer func() {
		for _, l := range held {
			_ = l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("finding a free port for an agent: %w", err)
		}
		held = append(held, l)
		addrs = append(addrs, l.Addr().String())
	}
	return addrs, nil
}
