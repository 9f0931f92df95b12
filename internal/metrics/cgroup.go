package metrics

import (
	"bytes"
	"errors"
	"io"
	"os"
	"strconv"
	"strings"
)

// ContainerRef is where a process runs, read from its cgroup.
type ContainerRef struct {
	PodUID      string
	ContainerID string
}

// ParseCgroup finds the Kubernetes pod UID and container ID in the content
// of /proc/<pid>/cgroup. It understands cgroup v2 ("0::/path") and v1
// ("N:controllers:/path") lines, the cgroupfs layout
// (/kubepods/burstable/pod<uid>/<container-id>) and the systemd layout
// (/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid>.slice/
// cri-containerd-<container-id>.scope), also below a cgroup namespace root
// ("/../../kubepods..."). ok is false for a process outside any pod.
func ParseCgroup(content []byte) (ref ContainerRef, ok bool) {
	for len(content) > 0 {
		line := content
		if i := bytes.IndexByte(content, '\n'); i >= 0 {
			line, content = content[:i], content[i+1:]
		} else {
			content = nil
		}
		// hierarchy-ID:controllers:path; the path may itself hold colons.
		first := bytes.IndexByte(line, ':')
		if first < 0 {
			continue
		}
		second := bytes.IndexByte(line[first+1:], ':')
		if second < 0 {
			continue
		}
		if ref, ok := parseCgroupPath(string(line[first+1+second+1:])); ok {
			return ref, true
		}
	}
	return ContainerRef{}, false
}

func parseCgroupPath(path string) (ContainerRef, bool) {
	segs := strings.Split(path, "/")
	for i, seg := range segs {
		uid, ok := podUIDFromSegment(seg)
		if !ok {
			continue
		}
		ref := ContainerRef{PodUID: uid}
		if i+1 < len(segs) {
			ref.ContainerID = containerIDFromSegment(segs[i+1])
		}
		return ref, true
	}
	return ContainerRef{}, false
}

// podUIDFromSegment reads "pod<uid>" (cgroupfs) or
// "kubepods[-<qos>]-pod<uid_with_underscores>.slice" (systemd).
func podUIDFromSegment(seg string) (string, bool) {
	var raw string
	switch {
	case strings.HasPrefix(seg, "pod"):
		raw = seg[len("pod"):]
	case strings.HasPrefix(seg, "kubepods") && strings.HasSuffix(seg, ".slice"):
		i := strings.LastIndex(seg, "-pod")
		if i < 0 {
			return "", false
		}
		raw = strings.ReplaceAll(seg[i+len("-pod"):len(seg)-len(".slice")], "_", "-")
	default:
		return "", false
	}
	if !isUID(raw) {
		return "", false
	}
	return raw, true
}

// isUID reports whether s looks like a Kubernetes UID (8-4-4-4-12 hex).
func isUID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return false
			}
		default:
			if !isHex(c) {
				return false
			}
		}
	}
	return true
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// containerIDFromSegment strips the runtime's prefix and ".scope" suffix:
// "cri-containerd-<id>.scope", "crio-<id>.scope", "docker-<id>.scope", or a
// bare "<id>" under cgroupfs.
func containerIDFromSegment(seg string) string {
	seg = strings.TrimSuffix(seg, ".scope")
	for _, p := range []string{"cri-containerd-", "crio-", "docker-", "containerd-"} {
		if strings.HasPrefix(seg, p) {
			return seg[len(p):]
		}
	}
	return seg
}

// procCgroups maps PIDs to their pods by reading <procRoot>/<pid>/cgroup,
// remembering answers while the PID keeps showing up on a GPU.
type procCgroups struct {
	root  string
	buf   []byte
	path  []byte
	cache map[uint32]procEntry
	gen   uint64
}

type procEntry struct {
	ref  ContainerRef
	ok   bool
	seen uint64
}

func newProcCgroups(root string) *procCgroups {
	return &procCgroups{root: root, buf: make([]byte, 0, 4096), cache: map[uint32]procEntry{}}
}

// begin starts a scrape; lookups mark PIDs seen in it.
func (p *procCgroups) begin() { p.gen++ }

// end forgets PIDs not seen since begin, so a reused PID is read afresh.
func (p *procCgroups) end() {
	for pid, e := range p.cache {
		if e.seen != p.gen {
			delete(p.cache, pid)
		}
	}
}

// lookup returns the container of pid; ok is false when the process is
// gone or runs outside a pod.
func (p *procCgroups) lookup(pid uint32) (ContainerRef, bool) {
	if e, hit := p.cache[pid]; hit {
		e.seen = p.gen
		p.cache[pid] = e
		return e.ref, e.ok
	}
	ref, ok, err := p.read(pid)
	if err != nil {
		// Not cached: the process may have just started or just ended.
		return ContainerRef{}, false
	}
	p.cache[pid] = procEntry{ref: ref, ok: ok, seen: p.gen}
	return ref, ok
}

func (p *procCgroups) read(pid uint32) (ContainerRef, bool, error) {
	p.path = append(p.path[:0], p.root...)
	p.path = append(p.path, '/')
	p.path = strconv.AppendUint(p.path, uint64(pid), 10)
	p.path = append(p.path, "/cgroup"...)
	f, err := os.Open(string(p.path))
	if err != nil {
		return ContainerRef{}, false, err
	}
	defer f.Close() // read-only
	p.buf = p.buf[:0]
	for {
		if len(p.buf) == cap(p.buf) {
			p.buf = append(p.buf, 0)[:len(p.buf)]
		}
		n, err := f.Read(p.buf[len(p.buf):cap(p.buf)])
		p.buf = p.buf[:len(p.buf)+n]
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return ContainerRef{}, false, err
		}
	}
	ref, ok := ParseCgroup(p.buf)
	return ref, ok, nil
}
