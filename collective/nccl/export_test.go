package nccl

// HoldLane occupies c's lane until release is called: no group is handed
// to NCCL meanwhile (the tests of Config.DeviceWaits order streams after
// groups not issued yet). With fail, the communicator fails (a local
// failure, the NCCL communicator aborted) on the lane before it is let go,
// so that the groups waiting for the lane are never handed over.
func HoldLane(c *Comm) (release func(fail bool)) {
	held, done := make(chan struct{}), make(chan bool)
	go c.do(func() error {
		close(held)
		if <-done {
			c.fail(newFailure(failAborted, c.rank, "failed by the test", true), false)
		}
		return nil
	})
	<-held
	return func(fail bool) { done <- fail }
}

// Issued reports whether w has been handed to NCCL (or failed to be).
func Issued(w *Work) bool {
	select {
	case <-w.issued:
		return true
	default:
		return false
	}
}
