package optimizer

import (
	"context"
	"fmt"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/optimizer/backend"

	"github.com/distopt/distopt/collective"
	"github.com/distopt/distopt/fp8"
)

// This file holds delayed scaling's amax histories in the backend's memory
// (DelayedScaler), so that a step derives its next scales there, without
// the host reading the amaxes back (Step and StepAsync alike; the first
// cast and a reload go through the host).
// The host's scaleState and the device copy take turns: whichever side
// last advanced the state is copied to the other when that one needs it.

// deviceHistories is the device copy of the histories and of the scales the
// bytes held were cast with.
type deviceHistories struct {
	hist, cast buffer.Buffer
	devStale   bool // the host advanced the state: copy it to the device before its next use
	hostStale  bool // the device advanced the state: copy it to the host before its next use
}

// initDelayed allocates the device copy when the recipe is delayed
// scaling and the backend a DelayedScaler.
func (o *Optimizer) initDelayed() error {
	if _, ok := o.backend.(backend.DelayedScaler); !ok || o.nSlots == 0 || o.cfg.Recipe.ScaleSource() != fp8.FromHistory {
		return nil
	}
	o.deviceHist = &deviceHistories{devStale: true}
	var err error
	if o.deviceHist.hist, err = o.backend.Alloc(4 * o.nSlots * o.cfg.Recipe.History()); err != nil {
		return err
	}
	o.deviceHist.cast, err = o.backend.Alloc(4 * o.nSlots)
	return err
}

// delayedOnDevice is phase 4 of a step with delayed scaling on a
// DelayedScaler backend: the amax all-reduce, ordered before DelayedScales
// in the backend's queue.
func (o *Optimizer) delayedOnDevice(ctx context.Context, op collective.Op) error {
	if err := o.pushHistories(); err != nil {
		return err
	}
	if err := o.pipe.after(ctx, o.comm.Start(op)); err != nil {
		return o.fail(fmt.Errorf("optimizer: amax all-reduce: %w", err))
	}
	r := o.cfg.Recipe
	if err := o.backend.(backend.DelayedScaler).DelayedScales(o.scale, o.scaleIn, o.deviceHist.cast, o.deviceHist.hist, o.amax, o.control.buf, o.nSlots, r.History(), r); err != nil {
		return o.fail(fmt.Errorf("optimizer: delayed scales from the reduced amaxes: %w", err))
	}
	o.deviceHist.hostStale = true
	return nil
}

// pushHistories copies the host's histories and cast scales to the device
// when the host advanced them (the scales and scale_inv are written by the
// host path itself).
func (o *Optimizer) pushHistories() error {
	if o.deviceHist == nil || !o.deviceHist.devStale {
		return nil
	}
	var hist []float32
	for _, h := range o.scales.Histories() {
		hist = append(hist, h...)
	}
	if err := o.backend.Write(o.deviceHist.hist, 0, float32Bytes(hist)); err != nil {
		return o.fail(err)
	}
	if err := o.backend.Write(o.deviceHist.cast, 0, float32Bytes(o.scales.Cast)); err != nil {
		return o.fail(err)
	}
	o.deviceHist.devStale = false
	return nil
}

// pullHistories copies the device's histories and scales to the host when
// the device advanced them.
func (o *Optimizer) pullHistories() error {
	if o.deviceHist == nil || !o.deviceHist.hostStale {
		return nil
	}
	n, l := o.nSlots, o.cfg.Recipe.History()
	raw := make([]byte, 4*n*(l+3))
	parts := []struct {
		b   buffer.Buffer
		off int
	}{{o.deviceHist.hist, 0}, {o.scale, 4 * n * l}, {o.scaleIn, 4 * n * (l + 1)}, {o.deviceHist.cast, 4 * n * (l + 2)}}
	for i, p := range parts {
		end := len(raw)
		if i+1 < len(parts) {
			end = parts[i+1].off
		}
		if err := o.backend.Read(raw[p.off:end], p.b, 0); err != nil {
			return o.fail(err)
		}
	}
	all := bytesFloat32(raw)
	hist := make([][]float32, n)
	for i := range hist {
		hist[i] = all[i*l : (i+1)*l]
	}
	o.scales.set(hist, all[n*l:n*(l+1)], all[n*(l+1):n*(l+2)], all[n*(l+2):])
	o.deviceHist.hostStale = false
	return nil
}
