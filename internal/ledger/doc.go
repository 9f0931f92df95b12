// Package ledger is a node's one record of which GPU or MIG device is held
// by whom: a DRA claim (by claim UID) or the device plugin (for the pods
// the kubelet gave it to). gpuplane-agent's device plugin and DRA driver
// both consult it, so that one node can serve nvidia.com/gpu pods and
// ResourceClaims at once without handing a device to both.
//
// Devices are named by UUID (a GPU's or a MIG device's). A GPU published
// for consumable capacity may be held by several claims at once, each by a
// share of its memory, as long as the shares fit; a whole hold, the device
// plugin and a share that does not fit are refused. A claim's hold is
// taken before the claim is prepared and refused when the plugin or another
// claim holds the device; the plugin's holds come from the kubelet's
// PodResources API (what pods hold now) and from Allocate calls not yet
// listed there. Changes are announced to subscribers, so the plugin can
// withdraw a claimed device from the kubelet and the DRA driver can taint a
// plugin-held device in its ResourceSlice.
//
// It must not decide health, talk to the API server or to the kubelet: the
// agent feeds it.
package ledger
