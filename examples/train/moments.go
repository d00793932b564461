package main

import (
	"fmt"
	"strings"

	"github.com/distopt/distopt/optimizer"
)

// setMoments sets cfg's moment types from the -moments flag: one type for
// both moments ("fp32", "bf16", "fp8") or "M,V" (e.g. "fp8,bf16"), and the
// FP8 block.
func setMoments(cfg *optimizer.Config, s string, block int) error {
	m, v, two := strings.Cut(s, ",")
	if !two {
		v = m
	}
	var err error
	if cfg.FirstMomentType, err = optimizer.ParseMomentDType(m); err != nil {
		return fmt.Errorf("-moments: %w", err)
	}
	if cfg.SecondMomentType, err = optimizer.ParseMomentDType(v); err != nil {
		return fmt.Errorf("-moments: %w", err)
	}
	cfg.MomentBlock = block
	return nil
}
