package main

import (
	"fmt"

	"github.com/distopt/distopt/optimizer"
)

// setMoments sets cfg's moment types from the -moments flag (see
// optimizer.ParseMomentTypes) and the FP8 block.
func setMoments(cfg *optimizer.Config, s string, block int) error {
	var err error
	if cfg.FirstMomentType, cfg.SecondMomentType, err = optimizer.ParseMomentTypes(s, cfg.Rule); err != nil {
		return fmt.Errorf("-moments: %w", err)
	}
	cfg.MomentBlock = block
	return nil
}
