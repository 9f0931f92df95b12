package gpunode

// EventReasonAPINotServed is the reason of the Warning event
// gpuplane-agent records on its Node when the cluster does not serve an
// optional Kubernetes API it would use (DRA's resource.k8s.io/v1): the
// message says which, and what the agent does without it.
const EventReasonAPINotServed = "APINotServed"
