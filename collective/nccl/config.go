package nccl

import (
	"log/slog"
	"time"

	"github.com/distopt/distopt/collective/rendezvous"
	"github.com/distopt/distopt/cuda"
)

// Defaults of Config.
const (
	// DefaultHeartbeat is the period of the heartbeats through the store.
	DefaultHeartbeat = time.Second
	// DefaultPeerTimeout is how long a peer's heartbeat may stall before
	// the peer counts as lost.
	DefaultPeerTimeout = 15 * time.Second
)

// peerGrace is how long groups already running may still complete after a
// peer reported a failure, before the communicator is aborted under them:
// a peer that closed after its last group leaves ours a moment to finish.
const peerGrace = 500 * time.Millisecond

// Config describes one rank's communicator.
type Config struct {
	// Store is the job's rendezvous store; it gives the rank and the number
	// of ranks, carries the NCCL unique id from rank 0 to the others, and
	// the failure reports and heartbeats. The caller keeps it open until
	// Close has returned, and closes it.
	Store *rendezvous.Store
	// Device is this rank's GPU (by convention the one of LOCAL_RANK).
	Device *cuda.Device
	// Compute is the stream on which the caller produces and consumes the
	// buffers, or nil. When set, every group waits on the communication
	// stream for the work queued on Compute before its Start, without
	// blocking the host. When nil, buffers must be ready when Start is
	// called (for example after a synchronous upload or a Synchronize).
	Compute *cuda.Stream
	// ExactAvg makes Avg on floating point types give collective.Reduce's
	// result (sum in float32, or float64, then divide by n): float32 and
	// float64 are summed by NCCL and divided by a kernel, bfloat16 is
	// widened to float32 first, which doubles the bytes sent. Without it,
	// Avg is NCCL's own (see the package documentation).
	ExactAvg bool
	// OneRankCopies runs the in-place reductions and all-gathers of a
	// one-rank communicator through NCCL anyway. By default they plan
	// nothing (their result is their input) and their Work completes at
	// once; tests set it to keep NCCL work, its events and its capture in
	// a CUDA graph, on one GPU.
	OneRankCopies bool
	// Heartbeat is the period of the heartbeats (0: DefaultHeartbeat). A
	// negative value turns heartbeats off: a vanished peer is then found
	// only by the deadlines of Wait.
	Heartbeat time.Duration
	// PeerTimeout is how long a peer's heartbeat may stall, or the store be
	// unreachable, before the peer counts as lost (0: DefaultPeerTimeout).
	PeerTimeout time.Duration
	// Logger receives a slow peer: a heartbeat stalled for half of
	// PeerTimeout, once per stall (Warn), before the peer counts as lost.
	// Nil: nothing is logged.
	Logger *slog.Logger
	// LaunchSpin bounds how long the hop to the communicator's lane that
	// issues a group waits there for NCCL to finish launching it in the
	// background (0: DefaultLaunchSpin). A longer launch is polled from
	// the communicator's goroutine, one hop per look, the lane free for
	// other work in between; a negative value always polls.
	LaunchSpin time.Duration
}

// DefaultLaunchSpin is Config.LaunchSpin's default: NCCL's background
// launch takes 60 to 90 µs after ncclGroupEnd on two H200s (NCCL 2.28), and
// waiting on the lane saves the hops of polling (about 20 µs each), at
// the price of holding the lane, and every other call of the communicator,
// while it waits.
const DefaultLaunchSpin = 200 * time.Microsecond

func (c Config) withDefaults() Config {
	if c.Heartbeat == 0 {
		c.Heartbeat = DefaultHeartbeat
	}
	if c.LaunchSpin == 0 {
		c.LaunchSpin = DefaultLaunchSpin
	}
	if c.PeerTimeout <= 0 {
		c.PeerTimeout = DefaultPeerTimeout
	}
	return c
}
