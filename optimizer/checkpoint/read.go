package checkpoint

import (
	"cmp"
	"slices"

	"github.com/distopt/distopt/safetensors"
)

// maxRunBytes bounds one read of consecutive chunks.
const maxRunBytes = 16 << 20

// request asks for the bytes [begin, end) of a file's data section,
// decoded as dt into dst.
type request struct {
	begin, end int64
	dt         safetensors.DType
	dst        []float32
}

// readRequests serves reqs (disjoint byte ranges of s's data section):
// it reads every chunk they touch once, in runs of consecutive chunks of
// at most maxRunBytes, checks each chunk's CRC-32C, and decodes the
// requested bytes. Nothing beyond the chunks touched is read.
func readRequests(s *shardFile, reqs []request) error {
	slices.SortFunc(reqs, func(a, b request) int { return cmp.Compare(a.begin, b.begin) })
	maxRun := max(1, maxRunBytes/s.chunk)
	// Chunk runs: the merged chunk intervals of the requests, split at maxRun.
	type run struct{ first, last int64 }
	var runs []run
	for _, r := range reqs {
		if r.end <= r.begin {
			continue
		}
		first, last := r.begin/s.chunk, (r.end-1)/s.chunk
		if n := len(runs); n > 0 && first <= runs[n-1].last+1 {
			runs[n-1].last = max(runs[n-1].last, last)
			continue
		}
		runs = append(runs, run{first, last})
	}
	var buf []byte
	j := 0
	for _, rn := range runs {
		for first := rn.first; first <= rn.last; first += maxRun {
			last := min(first+maxRun-1, rn.last)
			data, err := s.readChunks(first, last, buf)
			if err != nil {
				return err
			}
			buf = data
			lo, hi := first*s.chunk, first*s.chunk+int64(len(data))
			for j < len(reqs) && reqs[j].end <= lo {
				j++
			}
			for k := j; k < len(reqs) && reqs[k].begin < hi; k++ {
				r := reqs[k]
				a, b := max(r.begin, lo), min(r.end, hi)
				if a >= b {
					continue
				}
				esz := int64(r.dt.Size())
				decodeValues(r.dst[(a-r.begin)/esz:(b-r.begin)/esz], data[a-lo:b-lo], r.dt)
				s.read.add(b - a)
			}
		}
	}
	return nil
}
