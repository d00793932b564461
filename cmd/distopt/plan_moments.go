package main

import (
	"fmt"
	"strings"

	"github.com/distopt/distopt/optimizer"
)

// setMoments sets the moment storage of o's configuration from -moments:
// fp32, bf16 or fp8 for every moment, or M,V.
func (o *planOptions) setMoments(v string) error {
	bad := fmt.Errorf("-moments=%q: want bf16 or fp32 or fp8 (both moments), or M,V (e.g. fp8,bf16)", v)
	var err error
	if o.cfg.FirstMomentType, o.cfg.SecondMomentType, err = optimizer.ParseMomentTypes(v, o.cfg.Rule); err != nil {
		return bad
	}
	return nil
}

// momentBytes returns the bytes per element of all of cfg's moments
// (block scales included: 4/block for an FP8 moment) and their names for
// the configuration line.
func momentBytes(cfg optimizer.Config) (float64, string) {
	block := cfg.MomentBlock
	if block == 0 {
		block = 128
	}
	ts := []optimizer.MomentDType{cfg.FirstMomentType, cfg.SecondMomentType}
	if cfg.Rule == optimizer.RuleSGD {
		ts = ts[:1]
	}
	var total float64
	var names []string
	for _, t := range ts {
		if t == optimizer.MomentDefault {
			t = optimizer.MomentFloat32
		}
		total += float64(t.Bytes(block, block)) / float64(block)
		names = append(names, t.String())
	}
	name := strings.Join(names, "/")
	if strings.Contains(name, "fp8") {
		name += fmt.Sprintf(" (blocks of %d)", block)
	}
	return total, name
}
