package curve

import (
	"encoding/csv"
	"fmt"
	"io"
	"strconv"
)

// ParseCSV reads the curve of a run from the CSV that interop/gomlx's
// example writes with -out: a header "step,loss,val_loss", then one row
// per step counted from 0, the validation loss empty where none was
// measured. Row s becomes step s+1, the steps done when its losses were
// taken, as in the other formats.
func ParseCSV(r io.Reader, name string) (Curve, error) {
	c := Curve{Name: name}
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = 3
	head, err := cr.Read()
	if err != nil {
		return c, fmt.Errorf("curve: %s: %w", name, err)
	}
	if head[0] != "step" || head[1] != "loss" || head[2] != "val_loss" {
		return c, fmt.Errorf("curve: %s: header %q, want step,loss,val_loss", name, head)
	}
	for row := 2; ; row++ {
		rec, err := cr.Read()
		if err == io.EOF {
			return c, nil
		}
		if err != nil {
			return c, fmt.Errorf("curve: %s: %w", name, err)
		}
		s, err := strconv.Atoi(rec[0])
		if err != nil || s < 0 || (len(c.Train) > 0 && c.Train[len(c.Train)-1].Step >= s+1) {
			return c, fmt.Errorf("curve: %s:%d: step %q must be an integer above the previous row's", name, row, rec[0])
		}
		loss, err := strconv.ParseFloat(rec[1], 64)
		if err != nil {
			return c, fmt.Errorf("curve: %s:%d: loss %q: %w", name, row, rec[1], err)
		}
		c.Train = append(c.Train, Point{Step: s + 1, Loss: loss})
		if rec[2] == "" {
			continue
		}
		v, err := strconv.ParseFloat(rec[2], 64)
		if err != nil {
			return c, fmt.Errorf("curve: %s:%d: validation loss %q: %w", name, row, rec[2], err)
		}
		c.Valid = append(c.Valid, Point{Step: s + 1, Loss: v})
	}
}
