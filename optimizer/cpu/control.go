package cpu

import (
	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/optimizer/backend"
)

// Control implements Backend: backend.Control.Advance over the block in
// host memory.
func (c *Backend) Control(ctl, stats buffer.Buffer) error {
	blk, err := backend.DecodeControl(hostBuf(ctl))
	if err != nil {
		return err
	}
	var st [backend.StatsLen]int64
	copy(st[:], i64s(stats))
	blk.Advance(&st)
	copy(hostBuf(ctl), blk.Encode())
	return nil
}

// controlled returns what an update or cast with control block ctl does:
// skip (write nothing), or go on with gradient scale gs (def without a
// block).
func controlled(ctl buffer.Buffer, def float32) (gs float32, skip bool, err error) {
	if ctl == nil {
		return def, false, nil
	}
	blk, err := backend.DecodeControl(hostBuf(ctl))
	if err != nil {
		return 0, false, err
	}
	return blk.GradScale, blk.Skip != 0, nil
}
