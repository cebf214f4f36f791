package gpusched

import (
	"sort"
	"strings"

	v1 "github.com/gpusched/gpusched/clients/go/gpuschedv1"
)

// Workload mixes for the fgd policies (docs/placement-semantics.md section 12.1): derive one from
// the GPU requests a caller has seen, the way the paper's artifact does (the most popular shapes
// covering a share of them), and keep only the card types a request's nodes have.

// FGD is the policy value of the fragmentation-aware node and GPU policies, for the annotations
// AnnotationNodeSchedulerPolicy and AnnotationGPUSchedulerPolicy.
const FGD = "fgd"

// MixCounter counts the shapes seen. The zero value counts without a bound; set Limit to keep
// at most that many distinct shapes (a new shape seen when full only adds to Dropped).
type MixCounter struct {
	// Limit is the most distinct shapes kept (0: no bound).
	Limit int
	// Dropped counts observations of shapes not kept because the counter was full.
	Dropped uint64
	counts  map[string]*counted
}

type counted struct {
	shape *v1.WorkloadMixShape
	n     uint64
}

// shapeKey is the identity of a shape: every field but the probability, card types sorted.
func shapeKey(s *v1.WorkloadMixShape) string {
	var b strings.Builder
	for _, v := range []uint64{uint64(s.GetGpuCount()), uint64(s.GetGpucoresPercent()), s.GetGpumemMib(), uint64(s.GetGpumemPercent()), s.GetCpuMilli(), s.GetHostMemMib()} {
		b.WriteString(strings.Repeat("0", 20-len(uitoa(v))))
		b.WriteString(uitoa(v))
		b.WriteByte('/')
	}
	b.WriteString(strings.Join(s.GetGpuTypes(), "\x00"))
	return b.String()
}

func uitoa(v uint64) string {
	if v == 0 {
		return "0"
	}
	var d [20]byte
	i := len(d)
	for v > 0 {
		i--
		d[i] = byte('0' + v%10)
		v /= 10
	}
	return string(d[i:])
}

// Add counts n observations of shape (its probability is ignored; card types are trimmed,
// sorted and deduplicated, blank ones dropped). Shapes of 0 cards are not counted.
func (c *MixCounter) Add(shape *v1.WorkloadMixShape, n uint64) {
	if shape.GetGpuCount() == 0 || n == 0 {
		return
	}
	s := &v1.WorkloadMixShape{
		GpuCount: shape.GetGpuCount(), GpucoresPercent: shape.GetGpucoresPercent(),
		GpumemMib: shape.GetGpumemMib(), GpumemPercent: shape.GetGpumemPercent(),
		CpuMilli: shape.GetCpuMilli(), HostMemMib: shape.GetHostMemMib(),
	}
	seen := map[string]bool{}
	for _, t := range shape.GetGpuTypes() {
		t = strings.TrimSpace(t)
		if t != "" && !seen[t] {
			seen[t] = true
			s.GpuTypes = append(s.GpuTypes, t)
		}
	}
	sort.Strings(s.GpuTypes)
	if c.counts == nil {
		c.counts = map[string]*counted{}
	}
	k := shapeKey(s)
	if e, ok := c.counts[k]; ok {
		e.n += n
		return
	}
	if c.Limit > 0 && len(c.counts) >= c.Limit {
		c.Dropped += n
		return
	}
	c.counts[k] = &counted{shape: s, n: n}
}

// Len is the number of distinct shapes counted.
func (c *MixCounter) Len() int { return len(c.counts) }

// Mix is the mix of the most popular shapes (ties: the smaller shape first) that together cover
// at least coverage (0..1) of the observations, at most maxShapes of them, with probabilities
// renormalised over the shapes taken (the artifact takes 0.95). Nil when nothing was counted.
func (c *MixCounter) Mix(coverage float64, maxShapes int) *v1.WorkloadMix {
	var total uint64
	keys := make([]string, 0, len(c.counts))
	for k, e := range c.counts {
		total += e.n
		keys = append(keys, k)
	}
	if total == 0 || maxShapes <= 0 {
		return nil
	}
	sort.Slice(keys, func(i, j int) bool {
		a, b := c.counts[keys[i]], c.counts[keys[j]]
		if a.n != b.n {
			return a.n > b.n
		}
		return keys[i] < keys[j]
	})
	coverage = min(max(coverage, 0), 1)
	want := coverage * float64(total)
	var taken []*counted
	var covered uint64
	for _, k := range keys {
		if len(taken) >= maxShapes || (float64(covered) >= want && len(taken) > 0) {
			break
		}
		covered += c.counts[k].n
		taken = append(taken, c.counts[k])
	}
	m := &v1.WorkloadMix{}
	for _, e := range taken {
		s := e.shape
		m.Shapes = append(m.Shapes, &v1.WorkloadMixShape{
			Probability: float64(e.n) / float64(covered), GpuCount: s.GpuCount,
			GpucoresPercent: s.GpucoresPercent, GpumemMib: s.GpumemMib, GpumemPercent: s.GpumemPercent,
			GpuTypes: append([]string(nil), s.GpuTypes...), CpuMilli: s.CpuMilli, HostMemMib: s.HostMemMib,
		})
	}
	return m
}

// MixForCardTypes is mix for a request whose nodes have cards of cardTypes: a type entry that
// matches no card type (the use-gputype rule, case-insensitive substring) is dropped, a shape left
// with none is dropped, and the probabilities are renormalised. The service refuses unknown types
// (section 12.1); such a shape changes no decision, so dropping it is exact. Nil when no shape is
// left.
func MixForCardTypes(mix *v1.WorkloadMix, cardTypes []string) *v1.WorkloadMix {
	have := make([]string, len(cardTypes))
	for i, t := range cardTypes {
		have[i] = strings.ToUpper(t)
	}
	known := func(t string) bool {
		t = strings.ToUpper(strings.TrimSpace(t))
		for _, h := range have {
			if strings.Contains(h, t) {
				return true
			}
		}
		return false
	}
	out := &v1.WorkloadMix{}
	var sum float64
	for _, s := range mix.GetShapes() {
		types := s.GetGpuTypes()
		if len(types) > 0 {
			var kept []string
			for _, t := range types {
				if known(t) {
					kept = append(kept, t)
				}
			}
			if len(kept) == 0 {
				continue
			}
			types = kept
		}
		sum += s.GetProbability()
		out.Shapes = append(out.Shapes, &v1.WorkloadMixShape{
			Probability: s.GetProbability(), GpuCount: s.GetGpuCount(),
			GpucoresPercent: s.GetGpucoresPercent(), GpumemMib: s.GetGpumemMib(),
			GpumemPercent: s.GetGpumemPercent(), GpuTypes: append([]string(nil), types...),
			CpuMilli: s.GetCpuMilli(), HostMemMib: s.GetHostMemMib(),
		})
	}
	if len(out.Shapes) == 0 || sum <= 0 {
		return nil
	}
	for _, s := range out.Shapes {
		s.Probability /= sum
	}
	return out
}
