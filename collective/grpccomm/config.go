package grpccomm

import (
	"fmt"
	"log/slog"
	"time"
)

// Config tunes a communicator. The zero value is ready to use.
type Config struct {
	// Name tells apart the communicators of one job: the k-th New with a
	// given Name on one rank meets the k-th New with that Name on every other
	// rank. Default "default".
	Name string
	// Host is the IP address or host name this rank listens on and
	// advertises to its peers. Default: the local address from which this
	// host reaches the store's master address (loopback for a job on one
	// host).
	Host string
	// ChunkBytes is the largest payload of one message; buffers are streamed
	// in chunks of this size. Rounded down to a multiple of 8; default
	// DefaultChunkBytes.
	ChunkBytes int
	// Window is the number of chunks of one reduction that may be in flight
	// at once: the reduction buffers at most Window*(Size()-1) received
	// chunks. Default 4.
	Window int
	// StreamWindow is the HTTP/2 flow-control window of each peer's
	// connection, in bytes: how much a sender may run ahead of its receiver.
	// Default 4 MiB.
	StreamWindow int
	// KeepaliveTime and KeepaliveTimeout: a connection idle for
	// KeepaliveTime is pinged, and closed (the peer is lost) when no answer
	// comes within KeepaliveTimeout. Defaults 2 s and 5 s; KeepaliveTime is
	// at least 1 s.
	KeepaliveTime, KeepaliveTimeout time.Duration
	// CloseTimeout bounds how long Close waits for peers to take the data
	// this rank sent before it closes the connections. Default 10 s.
	CloseTimeout time.Duration
	// Logger receives the communicator's failure when it stops for one: a
	// peer lost or stopped responding, an abort, mismatched ops (Warn).
	// Nil: nothing is logged.
	Logger *slog.Logger
}

// DefaultChunkBytes is the default Config.ChunkBytes: just under 1 MiB, so
// that a message with its header fits one pooled 1 MiB buffer.
const DefaultChunkBytes = 1<<20 - 64

// withDefaults fills the zero fields of c and checks the others.
func (c Config) withDefaults() (Config, error) {
	if c.Name == "" {
		c.Name = "default"
	}
	if c.ChunkBytes == 0 {
		c.ChunkBytes = DefaultChunkBytes
	}
	c.ChunkBytes &^= 7
	if c.Window == 0 {
		c.Window = 4
	}
	if c.StreamWindow == 0 {
		c.StreamWindow = 4 << 20
	}
	if c.KeepaliveTime == 0 {
		c.KeepaliveTime = 2 * time.Second
	}
	if c.KeepaliveTimeout == 0 {
		c.KeepaliveTimeout = 5 * time.Second
	}
	if c.CloseTimeout == 0 {
		c.CloseTimeout = 10 * time.Second
	}
	switch {
	case c.ChunkBytes < 8 || c.ChunkBytes > 64<<20:
		return c, fmt.Errorf("grpccomm: ChunkBytes %d outside [8, 64 MiB]: %w", c.ChunkBytes, ErrConfig)
	case c.Window < 1:
		return c, fmt.Errorf("grpccomm: Window %d < 1: %w", c.Window, ErrConfig)
	case c.StreamWindow < 64<<10 || c.StreamWindow > 1<<30:
		return c, fmt.Errorf("grpccomm: StreamWindow %d outside [64 KiB, 1 GiB]: %w", c.StreamWindow, ErrConfig)
	case c.KeepaliveTime < 0 || c.KeepaliveTimeout < 0 || c.CloseTimeout < 0:
		return c, fmt.Errorf("grpccomm: negative duration: %w", ErrConfig)
	}
	return c, nil
}
