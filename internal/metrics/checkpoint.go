package metrics

import (
	"encoding/json"
	"fmt"
	"os"
	"time"
)

// DefaultCheckpointPath is the kubelet's device manager checkpoint, which
// records which pod UID holds which device IDs.
const DefaultCheckpointPath = "/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint"

// kubeletCheckpoint reads the device IDs of each pod UID from the kubelet's
// device checkpoint, re-reading it only when it changes. The PodResources
// API names pods but not their UIDs, and a process's cgroup names its pod
// UID but not the pod: the device IDs both sources list join them.
type kubeletCheckpoint struct {
	path    string
	modTime time.Time
	size    int64
	// byDevice maps a device ID as the kubelet lists it (with any ::N
	// replica suffix) to the UID of the pod holding it.
	byDevice map[string]string
}

func newKubeletCheckpoint(path string) *kubeletCheckpoint {
	return &kubeletCheckpoint{path: path, byDevice: map[string]string{}}
}

type checkpointFile struct {
	Data struct {
		PodDeviceEntries []struct {
			PodUID        string
			ContainerName string
			ResourceName  string
			// DeviceIDs is a map from NUMA node to IDs since Kubernetes
			// 1.20, a plain list before.
			DeviceIDs json.RawMessage
		}
	}
}

// refresh re-reads the checkpoint when it changed.
func (c *kubeletCheckpoint) refresh() error {
	if c.path == "" {
		return fmt.Errorf("no kubelet device checkpoint configured")
	}
	st, err := os.Stat(c.path)
	if err != nil {
		clear(c.byDevice)
		c.modTime, c.size = time.Time{}, 0
		return fmt.Errorf("reading the kubelet device checkpoint: %w", err)
	}
	if st.ModTime().Equal(c.modTime) && st.Size() == c.size {
		return nil
	}
	b, err := os.ReadFile(c.path)
	if err != nil {
		return fmt.Errorf("reading the kubelet device checkpoint: %w", err)
	}
	var f checkpointFile
	if err := json.Unmarshal(b, &f); err != nil {
		return fmt.Errorf("parsing the kubelet device checkpoint %s: %w", c.path, err)
	}
	clear(c.byDevice)
	for _, e := range f.Data.PodDeviceEntries {
		var perNUMA map[string][]string
		var flat []string
		if err := json.Unmarshal(e.DeviceIDs, &perNUMA); err == nil {
			for _, ids := range perNUMA {
				flat = append(flat, ids...)
			}
		} else if err := json.Unmarshal(e.DeviceIDs, &flat); err != nil {
			return fmt.Errorf("parsing the kubelet device checkpoint %s: device IDs of pod %s: %w", c.path, e.PodUID, err)
		}
		for _, id := range flat {
			c.byDevice[id] = e.PodUID
		}
	}
	c.modTime, c.size = st.ModTime(), st.Size()
	return nil
}
