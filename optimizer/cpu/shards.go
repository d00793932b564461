package cpu

import (
	"github.com/distopt/distopt/optimizer/backend"
)

// UpdateShards implements backend.ShardUpdater: Update shard by shard (the
// reference of the backends that launch once).
func (c *Backend) UpdateShards(as []*backend.UpdateArgs) error {
	if err := backend.CheckShards(as); err != nil {
		return err
	}
	for _, a := range as {
		if err := c.Update(a); err != nil {
			return err
		}
	}
	return nil
}

// CastShards implements backend.ShardUpdater: Cast shard by shard.
func (c *Backend) CastShards(cs []*backend.CastArgs) error {
	if err := backend.CheckCastShards(cs); err != nil {
		return err
	}
	for _, a := range cs {
		if err := c.Cast(a); err != nil {
			return err
		}
	}
	return nil
}
