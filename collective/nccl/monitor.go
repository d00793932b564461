package nccl

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/distopt/distopt/collective/rendezvous"
)

// watch waits for a failure report in the store and fails the
// communicator with it. A rank learns this way that a peer aborted (its
// deadline passed, NCCL failed), closed, or found a third rank gone.
func (c *Comm) watch(ctx context.Context) {
	defer c.wg.Done()
	vals, err := c.cfg.Store.Wait(ctx, c.prefix+"fail")
	if err != nil {
		return // stopped, or the store is gone (heartbeat notices)
	}
	f, err := decodeFailure(vals[0])
	if err != nil {
		f = newFailure(failAborted, c.rank, err.Error(), false)
	}
	c.fail(f, false)
}

// heartbeat writes this rank's heartbeat to the store every
// Config.Heartbeat and watches the next rank's (rank+1 mod n): every rank
// is watched by one other. A heartbeat that stalls for Config.PeerTimeout
// makes the watcher report the rank lost to everyone; a store that does not
// answer for as long makes every rank but 0 (which serves it) count rank 0
// lost.
func (c *Comm) heartbeat(ctx context.Context) {
	defer c.wg.Done()
	if c.size == 1 || c.cfg.Heartbeat < 0 {
		return
	}
	next := (c.rank + 1) % c.size
	key := func(r int) string { return c.prefix + "hb/" + strconv.Itoa(r) }
	var last []byte
	lastChange, lastContact := time.Now(), time.Now()
	warned := false // the stall since lastChange was logged
	t := time.NewTicker(c.cfg.Heartbeat)
	defer t.Stop()
	for beat := 1; ; beat++ {
		select {
		case <-ctx.Done():
			return
		case <-c.failedc:
			return
		case <-t.C:
		}
		callCtx, cancel := context.WithTimeout(ctx, max(c.cfg.Heartbeat, 500*time.Millisecond))
		err := c.cfg.Store.Set(callCtx, key(c.rank), []byte(strconv.Itoa(beat)))
		var v []byte
		if err == nil {
			v, err = c.cfg.Store.Get(callCtx, key(next))
			if errors.Is(err, rendezvous.ErrNotFound) {
				err = nil
			}
		}
		cancel()
		if ctx.Err() != nil {
			return
		}
		now := time.Now()
		if err != nil {
			if down := now.Sub(lastContact); c.rank != 0 && down > c.cfg.PeerTimeout {
				// Nobody to tell: the store is rank 0's.
				c.fail(newFailure(failLost, 0, fmt.Sprintf("the store it serves has not answered for %v: %v", down.Round(time.Millisecond), err), false), false)
				return
			}
			continue
		}
		lastContact = now
		if !bytes.Equal(v, last) {
			last, lastChange, warned = v, now, false
			continue
		}
		if stalled := now.Sub(lastChange); stalled > c.cfg.PeerTimeout/2 && !warned && c.cfg.Logger != nil {
			warned = true
			c.cfg.Logger.Warn("nccl: slow peer", "rank", c.rank, "peer", next, "no_heartbeat_for", stalled.Round(time.Millisecond), "lost_after", c.cfg.PeerTimeout)
		}
		if stalled := now.Sub(lastChange); stalled > c.cfg.PeerTimeout {
			c.fail(newFailure(failLost, next, fmt.Sprintf("no heartbeat for %v, seen by rank %d", stalled.Round(time.Millisecond), c.rank), false), true)
			return
		}
	}
}
