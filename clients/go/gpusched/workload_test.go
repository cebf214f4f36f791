package gpusched_test

import (
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/gpusched/gpusched/clients/go/gpusched"
	v1 "github.com/gpusched/gpusched/clients/go/gpuschedv1"
)

func TestPodBuilder(t *testing.T) {
	b := gpusched.NewPod("ml", "trainer-0").
		UID("uid-1").
		Annotate(gpusched.AnnotationGPUSchedulerPolicy, "spread").
		Annotations(map[string]string{gpusched.AnnotationDeviceScoringWeights: "slot=1,core=1,memory=3"}).
		InitContainer("warmup", gpusched.GPULimits(1).MemPercent(50)).
		Container("trainer", gpusched.GPULimits(2).MemMiB(16000).Cores(30)).
		ContainerWithRequests("sidecar", nil, gpusched.Resources{"cpu": "1"}.Set(gpusched.ResourceGPU, "0"))
	got := b.Build()
	want := &v1.Workload{
		Namespace: "ml",
		Name:      "trainer-0",
		Uid:       "uid-1",
		Spec: &v1.Workload_Kubernetes{Kubernetes: &v1.KubernetesWorkloadSpec{
			Annotations: map[string]string{
				"hami.io/gpu-scheduler-policy":   "spread",
				"hami.io/device-scoring-weights": "slot=1,core=1,memory=3",
			},
			InitContainers: []*v1.KubernetesContainer{
				{Name: "warmup", Limits: map[string]string{"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "50"}},
			},
			Containers: []*v1.KubernetesContainer{
				{Name: "trainer", Limits: map[string]string{"nvidia.com/gpu": "2", "nvidia.com/gpumem": "16000", "nvidia.com/gpucores": "30"}},
				{Name: "sidecar", Requests: map[string]string{"cpu": "1", "nvidia.com/gpu": "0"}},
			},
		}},
	}
	if !proto.Equal(got, want) {
		t.Fatalf("got %v\nwant %v", got, want)
	}
	// A built workload does not change with the builder.
	b.Annotate("x", "y").Container("late", nil)
	if !proto.Equal(got, want) {
		t.Fatal("Build() shares state with the builder")
	}
	again := b.Build()
	if len(again.GetKubernetes().GetContainers()) != 3 || again.GetKubernetes().GetAnnotations()["x"] != "y" {
		t.Fatalf("second build: %v", again)
	}
}

func TestResourcesSharesNoStateBetweenContainers(t *testing.T) {
	limits := gpusched.GPULimits(1)
	w := gpusched.NewPod("", "p").Container("a", limits).Build()
	limits.Cores(10)
	if _, ok := w.GetKubernetes().GetContainers()[0].GetLimits()[gpusched.ResourceGPUCores]; ok {
		t.Fatal("the builder keeps a reference to the caller's map")
	}
}
