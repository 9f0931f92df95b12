package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Topology names the levels of the cluster's network, widest first: each
// level a node label key whose values are the level's domains (a zone, a
// block of racks under one spine, a rack under one leaf switch, an NVLink
// domain's nvidia.com/gpu.clique, a host's kubernetes.io/hostname). A gang
// names a Topology (PodGroup spec.topology.name) to be placed inside one
// domain of a level, or as few as it can. Kueue's and KAI's Topology
// objects of the same shape are read as well (docs/topology.md).
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=topo
// +kubebuilder:printcolumn:name="Levels",type=string,JSONPath=`.spec.levels[*].nodeLabel`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Topology struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec TopologySpec `json:"spec"`
}

// TopologySpec is the ordered list of a topology's levels.
type TopologySpec struct {
	// Levels are the node label keys of the topology, widest first; each
	// key appears once.
	// +listType=atomic
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:XValidation:rule="self.all(l, self.filter(m, m.nodeLabel == l.nodeLabel).size() == 1)",message="each nodeLabel appears once"
	Levels []TopologyLevel `json:"levels"`
}

// TopologyLevel is one level of a topology.
type TopologyLevel struct {
	// NodeLabel is the node label key whose values are the level's domains.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=317
	// +kubebuilder:validation:Pattern=`^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$`
	NodeLabel string `json:"nodeLabel"`
}

// TopologyList is a list of Topologies.
//
// +kubebuilder:object:root=true
type TopologyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Topology `json:"items"`
}

// TopologyConstraint places a gang by the network's topology: inside one
// domain of the required level, or in as few domains as it can from the
// preferred level up, and, with a slice level, each slice of it inside one
// domain of that narrower level. Levels are node label keys.
type TopologyConstraint struct {
	// Name is the Topology whose levels the keys below are taken from:
	// gpuplane's Topology of that name, else Kueue's, else KAI's. Unset,
	// the keys are looked up in the Topologies there are (gpuplane's
	// first); a key no Topology has is a level of its own, so a required
	// label key alone works without any Topology object.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name,omitempty"`
	// Required is the level one domain of which holds every pod of the
	// gang, or none is placed.
	// +optional
	// +kubebuilder:validation:MaxLength=317
	Required string `json:"required,omitempty"`
	// Preferred is the level the gang would rather sit in one domain of;
	// failing that, as few domains as it can, as close to it as the
	// cluster allows. It is the required level or narrower.
	// +optional
	// +kubebuilder:validation:MaxLength=317
	Preferred string `json:"preferred,omitempty"`
	// SliceRequired is the level one domain of which holds each slice of
	// the gang: sliceSize pods, or without sliceSize each sub-group of its
	// workload (a JobSet's Job, a LeaderWorkerSet group, a PyTorchJob's
	// replica type). It is the gang's level or narrower.
	// +optional
	// +kubebuilder:validation:MaxLength=317
	SliceRequired string `json:"sliceRequired,omitempty"`
	// SliceSize is the number of pods of each slice.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100000
	SliceSize int32 `json:"sliceSize,omitempty"`
}

// IsZero reports whether c asks for nothing.
func (c *TopologyConstraint) IsZero() bool {
	return c == nil || *c == TopologyConstraint{}
}
