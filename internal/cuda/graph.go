package cuda

// This file holds CUDA graphs made by stream capture: the work a stream is
// given between BeginCapture and EndCapture is recorded, not run; the graph
// is instantiated once and launched as one unit, as often as wanted, each
// launch doing what the captured calls would have done (the same kernels
// with the same arguments, the same copies from the same addresses).

// CaptureMode is the driver's CUstreamCaptureMode: which calls of other
// threads a capture forbids.
type CaptureMode int

// Capture modes.
const (
	// CaptureGlobal forbids potentially unsafe calls (synchronous copies,
	// allocations, ...) in every thread while any global capture runs.
	CaptureGlobal CaptureMode = 0
	// CaptureThreadLocal forbids them in the capturing thread only.
	CaptureThreadLocal CaptureMode = 1
	// CaptureRelaxed forbids nothing beyond what cannot work: querying or
	// waiting for the capturing stream itself.
	CaptureRelaxed CaptureMode = 2
)

// Capturing reports whether work queued on s is being captured
// (cuStreamIsCapturing): s is in a capture begun with BeginCapture, or
// joined one by waiting on an event recorded in a capturing stream. A
// capture that a forbidden call invalidated counts as capturing (its work
// is not run either). Capturing is itself allowed during any capture.
func (s *Stream) Capturing() (bool, error) {
	var st int
	err := s.d.Do(func() error {
		var r Result
		st, r = cuStreamIsCapturing(s.h)
		return check("cuStreamIsCapturing", r)
	})
	return st != 0, err
}

// Graph is a captured graph, instantiated: a CUgraphExec and the CUgraph
// it was made from.
type Graph struct {
	d    *Device
	g, e uintptr
}

// BeginCapture starts capturing the work queued on s (cuStreamBeginCapture):
// until EndCapture it is recorded, not run. Work of other streams that
// waits on events recorded in s during the capture joins it.
func (s *Stream) BeginCapture(mode CaptureMode) error {
	err := s.d.Do(func() error { return check("cuStreamBeginCapture", cuStreamBeginCapture(s.h, int(mode))) })
	if err == nil {
		s.begun.Store(true)
	}
	return err
}

// CaptureBegun reports whether a capture begun on s by BeginCapture has not
// been ended yet. It asks the driver nothing (no hand-off to the device's
// worker), for hot paths of code that owns s; a capture s only joined
// through an event is not reported: Capturing sees both.
func (s *Stream) CaptureBegun() bool { return s.begun.Load() }

// EndCapture ends the capture begun on s and instantiates the graph. A
// capture that a forbidden call invalidated, or whose forked streams did
// not join s again, fails here with the driver's error.
func (s *Stream) EndCapture() (*Graph, error) {
	s.begun.Store(false)
	gr := &Graph{d: s.d}
	err := s.d.Do(func() error {
		var r Result
		if gr.g, r = cuStreamEndCapture(s.h); r != Success {
			return check("cuStreamEndCapture", r)
		}
		if gr.e, r = cuGraphInstantiate(gr.g); r != Success {
			cuGraphDestroy(gr.g)
			return check("cuGraphInstantiateWithFlags", r)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return gr, nil
}

// Launch queues one run of the graph on s (cuGraphLaunch) and returns at
// once.
func (g *Graph) Launch(s *Stream) error {
	if s.d != g.d {
		panic("cuda: Graph.Launch on a stream of another device")
	}
	return g.d.Do(func() error { return check("cuGraphLaunch", cuGraphLaunch(g.e, s.h)) })
}

// Destroy releases the graph; launches already queued complete.
func (g *Graph) Destroy() error {
	if g.e == 0 {
		return nil
	}
	e, h := g.e, g.g
	g.e, g.g = 0, 0
	return g.d.Do(func() error {
		r := cuGraphExecDestroy(e)
		if r2 := cuGraphDestroy(h); r == Success {
			r = r2
		}
		return check("cuGraphDestroy", r)
	})
}
