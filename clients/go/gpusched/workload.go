package gpusched

import (
	"maps"
	"strconv"

	v1 "github.com/gpusched/gpusched/clients/go/gpuschedv1"
)

// Pod annotations the server reads (HAMi's names; a server may be configured with others).
const (
	// AnnotationNodeSchedulerPolicy overrides the node policy: "binpack" or "spread".
	AnnotationNodeSchedulerPolicy = "hami.io/node-scheduler-policy"
	// AnnotationGPUSchedulerPolicy overrides the GPU policy, or gives a chain ("binpack,numa").
	AnnotationGPUSchedulerPolicy = "hami.io/gpu-scheduler-policy"
	// AnnotationDeviceScoringWeights sets the device score weights, e.g. "slot=1,core=1,memory=3".
	AnnotationDeviceScoringWeights = "hami.io/device-scoring-weights"
	// AnnotationUseGPUType lists allowed card types (comma list of case-insensitive substrings).
	AnnotationUseGPUType = "nvidia.com/use-gputype"
	// AnnotationNoUseGPUType lists refused card types.
	AnnotationNoUseGPUType = "nvidia.com/nouse-gputype"
	// AnnotationUseGPUUUID lists allowed card ids.
	AnnotationUseGPUUUID = "nvidia.com/use-gpuuuid"
	// AnnotationNoUseGPUUUID lists refused card ids.
	AnnotationNoUseGPUUUID = "nvidia.com/nouse-gpuuuid"
	// AnnotationNUMABind ("true") keeps all cards of a container on one NUMA node.
	AnnotationNUMABind = "nvidia.com/numa-bind"
	// AnnotationVGPUMode restricts the card modes ("hami-core", "mig", "mps").
	AnnotationVGPUMode = "nvidia.com/vgpu-mode"
	// AnnotationDeviceCordon is a node annotation (v1.Node.Annotations): card ids that take no
	// new work.
	AnnotationDeviceCordon = "hami.io/device-cordon"
)

// Container resource names of the GPU quantities.
const (
	// ResourceGPU is the number of cards.
	ResourceGPU = "nvidia.com/gpu"
	// ResourceGPUMem is the memory per card, MiB.
	ResourceGPUMem = "nvidia.com/gpumem"
	// ResourceGPUMemPercentage is the memory per card as percent of the card.
	ResourceGPUMemPercentage = "nvidia.com/gpumem-percentage"
	// ResourceGPUCores is the compute per card, percent.
	ResourceGPUCores = "nvidia.com/gpucores"
)

// Resources are a container's resources.limits (or resources.requests): quantity by resource
// name, as in a Pod manifest.
type Resources map[string]string

// GPULimits returns the limits of a container that wants n cards; chain MemMiB, MemPercent and
// Cores to add the other quantities:
//
//	gpusched.GPULimits(2).MemMiB(16000).Cores(30)
func GPULimits(n int) Resources {
	return Resources{ResourceGPU: strconv.Itoa(n)}
}

// MemMiB sets the memory per card in MiB (nvidia.com/gpumem) and returns r.
func (r Resources) MemMiB(mib uint64) Resources {
	r[ResourceGPUMem] = strconv.FormatUint(mib, 10)
	return r
}

// MemPercent sets the memory per card as percent of the card (nvidia.com/gpumem-percentage)
// and returns r.
func (r Resources) MemPercent(percent int) Resources {
	r[ResourceGPUMemPercentage] = strconv.Itoa(percent)
	return r
}

// Cores sets the compute per card in percent (nvidia.com/gpucores) and returns r.
func (r Resources) Cores(percent int) Resources {
	r[ResourceGPUCores] = strconv.Itoa(percent)
	return r
}

// Set sets any resource quantity and returns r.
func (r Resources) Set(name, quantity string) Resources {
	r[name] = quantity
	return r
}

// PodBuilder builds a workload in Kubernetes form: pod annotations and per-container resources,
// which the server parses and validates exactly like HAMi's admission webhook.
//
//	w := gpusched.NewPod("ml", "trainer-0").
//		Annotate(gpusched.AnnotationGPUSchedulerPolicy, "spread").
//		Container("trainer", gpusched.GPULimits(2).MemMiB(16000).Cores(30)).
//		Build()
type PodBuilder struct {
	w *v1.Workload
	k *v1.KubernetesWorkloadSpec
}

// NewPod starts a Kubernetes-form workload with this namespace and name (both informational).
func NewPod(namespace, name string) *PodBuilder {
	k := &v1.KubernetesWorkloadSpec{Annotations: map[string]string{}}
	w := &v1.Workload{Namespace: namespace, Name: name, Spec: &v1.Workload_Kubernetes{Kubernetes: k}}
	return &PodBuilder{w: w, k: k}
}

// UID sets the workload's uid (informational).
func (b *PodBuilder) UID(uid string) *PodBuilder {
	b.w.Uid = uid
	return b
}

// Annotate sets one pod annotation.
func (b *PodBuilder) Annotate(key, value string) *PodBuilder {
	b.k.Annotations[key] = value
	return b
}

// Annotations sets several pod annotations (e.g. a Pod's ObjectMeta.Annotations).
func (b *PodBuilder) Annotations(annotations map[string]string) *PodBuilder {
	maps.Copy(b.k.Annotations, annotations)
	return b
}

// Container appends an app container with these limits (nil for a container without GPU).
func (b *PodBuilder) Container(name string, limits Resources) *PodBuilder {
	return b.ContainerWithRequests(name, limits, nil)
}

// ContainerWithRequests appends an app container with limits and requests (requests are read
// for a resource that has no limit).
func (b *PodBuilder) ContainerWithRequests(name string, limits, requests Resources) *PodBuilder {
	b.k.Containers = append(b.k.Containers, kubeContainer(name, limits, requests))
	return b
}

// InitContainer appends an init container with these limits. Init containers run one at a
// time before the app containers.
func (b *PodBuilder) InitContainer(name string, limits Resources) *PodBuilder {
	b.k.InitContainers = append(b.k.InitContainers, kubeContainer(name, limits, nil))
	return b
}

// Build returns the workload. The builder keeps no reference to it: later calls on the builder
// do not change a workload already built.
func (b *PodBuilder) Build() *v1.Workload {
	k := &v1.KubernetesWorkloadSpec{Annotations: maps.Clone(b.k.Annotations)}
	for _, c := range b.k.InitContainers {
		k.InitContainers = append(k.InitContainers, kubeContainer(c.Name, c.Limits, c.Requests))
	}
	for _, c := range b.k.Containers {
		k.Containers = append(k.Containers, kubeContainer(c.Name, c.Limits, c.Requests))
	}
	return &v1.Workload{Namespace: b.w.Namespace, Name: b.w.Name, Uid: b.w.Uid, Spec: &v1.Workload_Kubernetes{Kubernetes: k}}
}

func kubeContainer(name string, limits, requests map[string]string) *v1.KubernetesContainer {
	c := &v1.KubernetesContainer{Name: name}
	if len(limits) > 0 {
		c.Limits = maps.Clone(limits)
	}
	if len(requests) > 0 {
		c.Requests = maps.Clone(requests)
	}
	return c
}
