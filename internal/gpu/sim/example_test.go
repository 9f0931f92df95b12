package sim_test

import (
	"context"
	"fmt"
	"time"

	"github.com/gpuplane/gpuplane/internal/gpu"
	"github.com/gpuplane/gpuplane/internal/gpu/sim"
)

// A simulated DGX H100 on a manual clock: a process loads GPU 0 for a
// minute, and the sample shows its memory, utilization and energy.
func Example() {
	profile, err := sim.Load("dgxh100")
	if err != nil {
		fmt.Println(err)
		return
	}
	clock := sim.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	node, err := sim.New(profile, sim.Options{NodeName: "gpu-node-1", Clock: clock})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer node.Close()

	if err := node.RunProcess(0, sim.Proc{PID: 4242, MemMiB: 20480, Util: 100, MemUtil: 100}); err != nil {
		fmt.Println(err)
		return
	}
	clock.Advance(time.Minute)
	var s gpu.Sample
	if err := node.Sample(context.Background(), 0, &s); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("%s: util %d%%, %d MiB used, %.0f W, %.0f kJ\n",
		node.Name(), s.GPUUtil, s.FBUsedMiB, float64(s.PowerMilliW)/1000, float64(s.EnergyMilliJ)/1e6)
	// Output: sim:dgxh100: util 100%, 20480 MiB used, 700 W, 42 kJ
}
