package optimizer

// The segment tables of every optimizer in this package's tests are
// checked (see shards.go).
func init() { checkInvariants = true }
