package nccl

import "fmt"

// Comm is an NCCL communicator (an ncclComm_t). Its methods must run on a
// thread where the communicator's CUDA context is current (see the package
// documentation), and not concurrently with each other.
type Comm struct {
	lib *Library
	h   uintptr
}

// UniqueID creates the identifier of a new communicator (ncclGetUniqueId).
// It opens a bootstrap socket in this process; the process that calls it
// must take part in the communicator (as rank 0, by convention).
func (l *Library) UniqueID() (UniqueID, error) {
	var id UniqueID
	r := l.getUniqueID(&id)
	return id, l.check("ncclGetUniqueId", r, nil)
}

// InitRank creates this process's rank of a communicator of nranks ranks
// (ncclCommInitRankConfig) on the GPU of the calling thread's current
// context. Every rank passes the same id. With cfg.Blocking false the call
// returns at once: the error then matches ErrInProgress while the
// communicator is being built, and the returned Comm is valid for
// AsyncError and Abort only until AsyncError stops matching ErrInProgress.
// On any other error the returned Comm is nil.
func (l *Library) InitRank(nranks int, id UniqueID, rank int, cfg Config) (*Comm, error) {
	if nranks < 1 || rank < 0 || rank >= nranks {
		panic(fmt.Sprintf("nccl: InitRank of rank %d of %d", rank, nranks))
	}
	h, r := l.commInitRankConfig(nranks, &id, rank, cfg)
	c := &Comm{lib: l, h: h}
	err := l.check("ncclCommInitRankConfig", r, nil)
	if err != nil && r != InProgress {
		if h != 0 {
			l.commAbort(h)
		}
		return nil, err
	}
	return c, err
}

// GroupStart opens a group (ncclGroupStart): collective calls up to the
// matching GroupEnd are launched together.
func (l *Library) GroupStart() error { return l.check("ncclGroupStart", l.groupStart(), nil) }

// GroupEnd closes a group and launches its operations (ncclGroupEnd). With a
// non-blocking communicator in the group the error may match ErrInProgress:
// the launch goes on in the background, and the operations are on their
// streams once Comm.AsyncError stops matching ErrInProgress.
func (l *Library) GroupEnd() error { return l.check("ncclGroupEnd", l.groupEnd(), nil) }

// ErrorString returns NCCL's description of r (ncclGetErrorString).
func (l *Library) ErrorString(r Result) string { return l.errorString(r) }

// Library returns the library the communicator belongs to.
func (c *Comm) Library() *Library { return c.lib }

// Handle returns the raw ncclComm_t.
func (c *Comm) Handle() uintptr { return c.h }

// AsyncError returns the communicator's state (ncclCommGetAsyncError): nil
// when it is healthy and idle, an error matching ErrInProgress while a
// non-blocking call goes on, and the error that broke it otherwise (after
// which only Abort is useful).
func (c *Comm) AsyncError() error {
	state, r := c.lib.commGetAsyncError(c.h)
	if err := c.lib.check("ncclCommGetAsyncError", r, c); err != nil {
		return err
	}
	return c.lib.check("ncclCommGetAsyncError", state, c)
}

// LastError returns NCCL's message for the last failure on c
// (ncclGetLastError), possibly empty.
func (c *Comm) LastError() string { return c.lib.lastError(c) }

// Count returns the number of ranks (ncclCommCount).
func (c *Comm) Count() (int, error) {
	n, r := c.lib.commQuery(qCount, c.h)
	return n, c.lib.check("ncclCommCount", r, c)
}

// UserRank returns this rank (ncclCommUserRank).
func (c *Comm) UserRank() (int, error) {
	n, r := c.lib.commQuery(qUserRank, c.h)
	return n, c.lib.check("ncclCommUserRank", r, c)
}

// CuDevice returns the CUDA device ordinal of the communicator
// (ncclCommCuDevice).
func (c *Comm) CuDevice() (int, error) {
	n, r := c.lib.commQuery(qCuDevice, c.h)
	return n, c.lib.check("ncclCommCuDevice", r, c)
}

// Finalize flushes the communicator's operations and releases its network
// resources (ncclCommFinalize); Destroy must follow. Non-blocking: the error
// may match ErrInProgress; poll AsyncError.
func (c *Comm) Finalize() error {
	return c.lib.check("ncclCommFinalize", c.lib.commFinalize(c.h), c)
}

// Destroy frees the communicator (ncclCommDestroy). It may wait for the
// communicator's operations; use Abort for one that may hang.
func (c *Comm) Destroy() error {
	return c.lib.check("ncclCommDestroy", c.lib.commDestroy(c.h), nil)
}

// Abort stops the communicator's operations and frees it (ncclCommAbort).
// It does not wait for peers: kernels waiting for a vanished peer are told
// to stop.
func (c *Comm) Abort() error {
	return c.lib.check("ncclCommAbort", c.lib.commAbort(c.h), nil)
}

// AllGather queues on stream the gathering of count elements of dt at send
// from every rank into recv, rank r's at offset r*count elements
// (ncclAllGather). In place when send is recv + rank*count*dt.Size().
func (c *Comm) AllGather(send, recv uintptr, count int, dt DataType, stream uintptr) error {
	return c.lib.check("ncclAllGather", c.lib.collective(cAllGather, send, recv, count, dt, 0, 0, c.h, stream), c)
}

// ReduceScatter queues on stream the reduction with op of the ranks'
// nranks*count elements at send, leaving block r (count elements) in recv
// of rank r (ncclReduceScatter). In place when recv is
// send + rank*count*dt.Size().
func (c *Comm) ReduceScatter(send, recv uintptr, count int, dt DataType, op RedOp, stream uintptr) error {
	return c.lib.check("ncclReduceScatter", c.lib.collective(cReduceScatter, send, recv, count, dt, op, 0, c.h, stream), c)
}

// AllReduce queues on stream the reduction with op of count elements of
// every rank's send into every rank's recv (ncclAllReduce). send may equal
// recv.
func (c *Comm) AllReduce(send, recv uintptr, count int, dt DataType, op RedOp, stream uintptr) error {
	return c.lib.check("ncclAllReduce", c.lib.collective(cAllReduce, send, recv, count, dt, op, 0, c.h, stream), c)
}

// Broadcast queues on stream the copy of count elements at send of rank
// root into recv of every rank (ncclBroadcast); send is read on root only
// and may equal recv.
func (c *Comm) Broadcast(send, recv uintptr, count int, dt DataType, root int, stream uintptr) error {
	return c.lib.check("ncclBroadcast", c.lib.collective(cBroadcast, send, recv, count, dt, 0, root, c.h, stream), c)
}

// Send queues on stream the sending of count elements of dt at send to
// rank peer (ncclSend); the peer's matching Recv must be in a group that
// progresses together with this one (point-to-point calls of one
// ncclGroupStart/ncclGroupEnd, such as an all-to-all, run concurrently).
func (c *Comm) Send(send uintptr, count int, dt DataType, peer int, stream uintptr) error {
	return c.lib.check("ncclSend", c.lib.collective(cSend, send, 0, count, dt, 0, peer, c.h, stream), c)
}

// Recv queues on stream the receiving of count elements of dt from rank
// peer into recv (ncclRecv); see Send.
func (c *Comm) Recv(recv uintptr, count int, dt DataType, peer int, stream uintptr) error {
	return c.lib.check("ncclRecv", c.lib.collective(cRecv, 0, recv, count, dt, 0, peer, c.h, stream), c)
}

// collKind selects the collective of Library.collective.
type collKind int

const (
	cAllGather collKind = iota
	cReduceScatter
	cAllReduce
	cBroadcast
	cSend
	cRecv
)

// commQueryKind selects the query of Library.commQuery.
type commQueryKind int

const (
	qCount commQueryKind = iota
	qUserRank
	qCuDevice
)
