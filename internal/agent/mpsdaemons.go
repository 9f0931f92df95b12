package agent

import (
	"context"
	"log/slog"
	"sync"

	"github.com/gpuplane/gpuplane/internal/mps"
	"github.com/gpuplane/gpuplane/internal/sharing"
)

// mpsDaemons are the running MPS control daemons of one config.
type mpsDaemons struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func (d *mpsDaemons) stop() {
	if d == nil {
		return
	}
	d.cancel()
	d.wg.Wait()
}

// startMPS starts one control daemon per MPS-shared sharing.
func startMPS(ctx context.Context, o PluginOptions, s *pluginState, log *slog.Logger) *mpsDaemons {
	ctx, cancel := context.WithCancel(ctx)
	out := &mpsDaemons{cancel: cancel}
	for _, r := range s.resources {
		var gpus []string
		var first *sharing.Device
		for i := range r.Devices {
			d := &r.Devices[i]
			if d.Sharing != sharing.SharingMPS {
				continue
			}
			if first == nil {
				first = d
			}
			if len(gpus) == 0 || gpus[len(gpus)-1] != d.UUID {
				gpus = append(gpus, d.UUID)
			}
		}
		if first == nil {
			continue
		}
		root := s.cfg.MPSRoot()
		daemon, err := mps.NewDaemon(mps.DaemonOptions{
			Resource: r.Name, PipeDir: mps.PipeDir(root, r.ShortName()), LogDir: mps.LogDir(root, r.ShortName()),
			GPUs: gpus, ActiveThreadPercentage: first.MPSActiveThreadPercentage(), PinnedMemLimitMiB: first.MPSMemoryLimitMiB(),
			Runner: o.MPSRunner, Logger: log.With("part", "mps"),
		})
		if err != nil {
			log.Error("MPS control daemon not started", "resource", r.Name, "err", err)
			continue
		}
		out.wg.Add(1)
		go func() {
			defer out.wg.Done()
			if err := daemon.Run(ctx); err != nil {
				log.Error("MPS control daemon supervision ended", "resource", r.Name, "err", err)
			}
		}()
	}
	return out
}
