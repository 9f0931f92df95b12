package sharing

// Served is one snapshot of the resources the device plugin serves, as
// one config that took effect built them. It is never changed once made:
// every part that maps a kubelet device ID back to its GPU reads the same
// snapshot, without locks. A nil *Served serves nothing.
type Served struct {
	resources []*Resource
	byName    map[string]*Resource
}

// NewServed returns the snapshot of rs, which must not change afterwards.
func NewServed(rs []*Resource) *Served {
	s := &Served{resources: rs, byName: make(map[string]*Resource, len(rs))}
	for _, r := range rs {
		s.byName[r.Name] = r
	}
	return s
}

// Resources are the resources served, ordered by name.
func (s *Served) Resources() []*Resource {
	if s == nil {
		return nil
	}
	return s.resources
}

// Resource returns the resource named name, nil when it is not served.
func (s *Served) Resource(name string) *Resource {
	if s == nil {
		return nil
	}
	return s.byName[name]
}

// Device returns the device with kubelet ID id of the resource named
// resource.
func (s *Served) Device(resource, id string) (*Device, bool) {
	r := s.Resource(resource)
	if r == nil {
		return nil, false
	}
	return r.Device(id)
}
