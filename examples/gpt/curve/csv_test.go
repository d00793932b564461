package curve

import (
	"fmt"
	"math"
	"strings"
	"testing"
)

// TestParseCSV reads rows written as interop/gomlx's example writes them
// (fmt's %g of a float32 loss, the validation loss every third step) and
// checks every loss reads back as the same float32, at step s+1.
func TestParseCSV(t *testing.T) {
	var b strings.Builder
	b.WriteString("step,loss,val_loss\n")
	loss := func(s int) float32 { return float32(5.5 * math.Exp(-float64(s)/7)) }
	for s := range 10 {
		line := fmt.Sprintf("%d,%g,", s, loss(s))
		if s%3 == 0 {
			line += fmt.Sprint(loss(s) * 1.01)
		}
		b.WriteString(line + "\n")
	}
	c, err := ParseCSV(strings.NewReader(b.String()), "gomlx")
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Train) != 10 || len(c.Valid) != 4 {
		t.Fatalf("%d training and %d validation points, want 10 and 4", len(c.Train), len(c.Valid))
	}
	for i, p := range c.Train {
		if p.Step != i+1 || float32(p.Loss) != loss(i) {
			t.Errorf("train %d: %+v, want step %d loss %g", i, p, i+1, loss(i))
		}
	}
	for i, p := range c.Valid {
		if s := 3 * i; p.Step != s+1 || float32(p.Loss) != loss(s)*1.01 {
			t.Errorf("valid %d: %+v, want step %d loss %g", i, p, s+1, loss(s)*1.01)
		}
	}
	for _, bad := range []string{
		"",
		"s,l,v\n0,1,\n",
		"step,loss,val_loss\n0,1\n",
		"step,loss,val_loss\n0,x,\n",
		"step,loss,val_loss\n0,1,y\n",
		"step,loss,val_loss\n1,1,\n1,1,\n",
		"step,loss,val_loss\n-1,1,\n",
	} {
		if _, err := ParseCSV(strings.NewReader(bad), "bad"); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
