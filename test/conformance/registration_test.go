package conformance

import (
	"testing"
	"time"
)

func TestRegistration(t *testing.T) {
	k := startKubelet(t)
	startAgent(t, "dgxh100", "version: v1\n", nil)
	k.waitCounts(5*time.Second, "nvidia.com/gpu", 8, 8)
}
