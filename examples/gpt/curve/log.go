package curve

import (
	"bufio"
	"fmt"
	"io"
	"regexp"
	"strconv"
)

var (
	trainLine = regexp.MustCompile(`^step\s+(\d+)/\d+\s+loss\s+(\S+)`)
	validLine = regexp.MustCompile(`^step\s+(\d+)\s+validation loss\s+(\S+)`)
)

// ParseLog reads the curve of a run from its progress lines (the format
// both examples/gpt and scripts/gpt/torch_gpt.py print):
//
//	step    10/2000  loss 3.1416  ...
//	step    10  validation loss 3.0000 ...
//
// Other lines are skipped. The losses are as printed (4 decimals): enough
// for the loss criteria, not for the bit-for-bit resume check, which reads
// the JSON curves.
func ParseLog(r io.Reader, name string) (Curve, error) {
	c := Curve{Name: name}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<16), 1<<20)
	for line := 1; sc.Scan(); line++ {
		dst, m := &c.Train, trainLine.FindStringSubmatch(sc.Text())
		if m == nil {
			dst, m = &c.Valid, validLine.FindStringSubmatch(sc.Text())
		}
		if m == nil {
			continue
		}
		step, err1 := strconv.Atoi(m[1])
		loss, err2 := strconv.ParseFloat(m[2], 64)
		if err1 != nil || err2 != nil || step < 1 {
			return c, fmt.Errorf("curve: %s:%d: bad progress line %q", name, line, sc.Text())
		}
		if n := len(*dst); n > 0 && (*dst)[n-1].Step >= step {
			return c, fmt.Errorf("curve: %s:%d: step %d after step %d", name, line, step, (*dst)[n-1].Step)
		}
		*dst = append(*dst, Point{Step: step, Loss: loss})
	}
	if err := sc.Err(); err != nil {
		return c, fmt.Errorf("curve: %s: %w", name, err)
	}
	return c, nil
}
