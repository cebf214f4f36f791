package gpusched

import (
	"math"
	"testing"

	v1 "github.com/gpusched/gpusched/clients/go/gpuschedv1"
)

func shape(gpus, cores uint32, types ...string) *v1.WorkloadMixShape {
	return &v1.WorkloadMixShape{GpuCount: gpus, GpucoresPercent: cores, GpumemPercent: cores, GpuTypes: types}
}

func TestMixCoversTheMostPopularShapes(t *testing.T) {
	var c MixCounter
	c.Add(shape(1, 100), 60)
	c.Add(shape(1, 50), 30)
	c.Add(shape(2, 100), 8)
	c.Add(shape(1, 10), 2)
	m := c.Mix(0.95, 64)
	if len(m.GetShapes()) != 3 {
		t.Fatalf("want 3 shapes, got %v", m)
	}
	want := []float64{60.0 / 98, 30.0 / 98, 8.0 / 98}
	for i, s := range m.GetShapes() {
		if math.Abs(s.GetProbability()-want[i]) > 1e-12 {
			t.Fatalf("shape %d: %v", i, s)
		}
	}
	if got := len(c.Mix(1, 2).GetShapes()); got != 2 {
		t.Fatalf("at most 2 shapes, got %d", got)
	}
	if (&MixCounter{}).Mix(0.95, 64) != nil {
		t.Fatal("an empty counter has no mix")
	}
	bounded := MixCounter{Limit: 1}
	bounded.Add(shape(1, 100), 1)
	bounded.Add(shape(1, 50), 3)
	if bounded.Len() != 1 || bounded.Dropped != 3 {
		t.Fatalf("bounded: %d shapes, %d dropped", bounded.Len(), bounded.Dropped)
	}
}

func TestMixForCardTypesDropsUnknownTypes(t *testing.T) {
	var c MixCounter
	c.Add(shape(1, 100), 2)
	c.Add(shape(1, 50, "v100", "A100"), 1)
	c.Add(shape(1, 50, "H100"), 1)
	m := MixForCardTypes(c.Mix(1, 64), []string{"NVIDIA-A100-SXM4-40GB", "Tesla-T4"})
	if len(m.GetShapes()) != 2 || len(m.GetShapes()[1].GetGpuTypes()) != 1 || m.GetShapes()[1].GetGpuTypes()[0] != "A100" {
		t.Fatalf("kept %v", m)
	}
	if math.Abs(m.GetShapes()[0].GetProbability()-2.0/3) > 1e-12 {
		t.Fatalf("renormalised: %v", m)
	}
}
