package main

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/distopt/distopt/plan"
	"github.com/distopt/distopt/shard"
)

// TestPlanClosedForm checks the bytes per parameter of every preset and of
// -params counts against the closed form written out here: 1 byte of FP8
// weights, 2 of bf16 gradients and 12/d of master and moments; with
// sharded gradients 2/d and two gradient buffers of the largest bucket,
// which holds at least the largest tensor and at most the default bucket
// or that tensor when larger (it has a bucket of its own). Scales, padding and the BF16 norms add at most 0.01 byte per
// parameter at these powers of two. A count planned as one tensor (the
// defect this guards against) puts it all in one bucket, and sharded
// gradients then cost 4 bytes per parameter more than the closed form.
func TestPlanClosedForm(t *testing.T) {
	ds := []int{1, 8, 64}
	type model struct{ name, flag, value string }
	var models []model
	for _, p := range plan.Presets {
		models = append(models, model{p.Name, "-model", p.Name})
	}
	for _, n := range []string{"350M", "1.3B", "7B", "70B", "405B"} {
		models = append(models, model{"params " + n, "-params", n})
	}
	for _, m := range models {
		var params plan.Model
		if m.flag == "-model" {
			p, err := plan.LookupPreset(m.value)
			require.NoError(t, err)
			params = p.Model
		} else {
			c, err := plan.ParseCount(m.value)
			require.NoError(t, err)
			params = plan.ForCount(c)
		}
		n, largest := int64(0), int64(0)
		for _, p := range params.Params() {
			k := int64(1)
			for _, s := range p.Shape {
				k *= int64(s)
			}
			n, largest = n+k, max(largest, k)
		}
		pool := 2 * 2 * float64(min(max(shard.DefaultBucketElements, largest), n)) / float64(n)
		for _, sharded := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/sharded=%v", m.name, sharded), func(t *testing.T) {
				args := []string{m.flag, m.value, "-d", dsFlag(ds)}
				if sharded {
					args = append(args, "-sharded-grads")
				}
				buffers, _ := planOutput(t, ds, args...)
				for i, d := range ds {
					got := atof(t, buffers["bytes per parameter"][i])
					if !sharded {
						assert.InDelta(t, 1+2+12/float64(d), got, 0.01, "d=%d", d)
						continue
					}
					// The buffers hold the largest bucket: at least the
					// largest tensor, at most the default bucket's size.
					assert.LessOrEqual(t, got, 1+pool+14/float64(d)+0.01, "d=%d", d)
					assert.GreaterOrEqual(t, got, 1+4*float64(largest)/float64(n)+14/float64(d)-0.001, "d=%d", d)
				}
			})
		}
	}
}
