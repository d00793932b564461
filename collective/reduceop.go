package collective

import "fmt"

// ReduceOp is the reduction of ReduceScatter and AllReduce.
type ReduceOp uint8

const (
	// Sum adds the contributions of all ranks.
	Sum ReduceOp = iota + 1
	// Avg adds the contributions and divides by the number of ranks
	// (floating point types only).
	Avg
	// Max keeps the largest contribution.
	Max
)

func (o ReduceOp) String() string {
	switch o {
	case Sum:
		return "sum"
	case Avg:
		return "avg"
	case Max:
		return "max"
	}
	return fmt.Sprintf("ReduceOp(%d)", uint8(o))
}
