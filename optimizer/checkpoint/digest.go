package checkpoint

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/optimizer"
)

// paramDigests returns the SHA-256 of the gathered parameters as this rank
// holds them: over the FP8 parameters (name, bytes and scale_inv or E8M0
// scales, in layout order) and over the high-precision ones (name and
// bytes). Every rank of a healthy optimizer returns the same two digests.
func paramDigests(o *optimizer.Optimizer) (fp8Sum, hpSum string, err error) {
	be := o.Backend()
	f8, hp := sha256.New(), sha256.New()
	for _, p := range o.Layout().Params {
		v, err := o.Param(p.Name)
		if err != nil {
			return "", "", err
		}
		var h hash.Hash = f8
		if p.HighPrecision {
			h = hp
		}
		fmt.Fprintf(h, "%q\n", p.Name)
		for _, b := range []buffer.Buffer{v.Data, v.ScaleInv} {
			if b == nil {
				continue
			}
			raw := make([]byte, b.Len())
			if err := be.Read(raw, b, 0); err != nil {
				return "", "", err
			}
			fmt.Fprintf(h, "%d\n", len(raw))
			h.Write(raw)
		}
	}
	return hex.EncodeToString(f8.Sum(nil)), hex.EncodeToString(hp.Sum(nil)), nil
}
