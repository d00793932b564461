package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/distopt/distopt/examples/maintest"
)

// TestStepTimeFlagBounds: an -mfu outside (0, 1] or a -tokens below 1 is
// refused with status 2 and one line naming the flag, printing no plan.
// Before, -mfu NaN, 0 and -1 printed step times like -9223372036851 ms.
func TestStepTimeFlagBounds(t *testing.T) {
	cases := []struct{ flag, value, says string }{
		{"-mfu", "NaN", "distopt plan: -mfu=NaN: want a fraction of the GPU's peak in (0, 1]"},
		{"-mfu", "0", "distopt plan: -mfu=0: want a fraction"},
		{"-mfu", "-1", "distopt plan: -mfu=-1: want a fraction"},
		{"-mfu", "1.5", "distopt plan: -mfu=1.5: want a fraction"},
		{"-mfu", "+Inf", "distopt plan: -mfu=+Inf: want a fraction"},
		{"-tokens", "0", "distopt plan: -tokens=0: want at least 1"},
		{"-tokens", "-5", "distopt plan: -tokens=-5: want at least 1"},
	}
	for _, c := range cases {
		t.Run(c.flag+" "+c.value, func(t *testing.T) {
			var out, errb bytes.Buffer
			st := runPlan([]string{"-model", "gpt-1.3b", "-steptime", "h100", "-d", "8", c.flag, c.value}, &out, &errb)
			if st != 2 || out.Len() != 0 || !maintest.OneLine(errb.String(), c.says) {
				t.Fatalf("status %d, stdout %q, stderr %q; want 2, nothing, and one line starting %q", st, out.String(), errb.String(), c.says)
			}
		})
	}
	var out, errb bytes.Buffer
	if st := runPlan([]string{"-model", "gpt-1.3b", "-steptime", "h100", "-d", "8", "-mfu", "1"}, &out, &errb); st != 0 || strings.Contains(out.String(), "-92233") {
		t.Fatalf("-mfu 1: status %d\n%s%s", st, out.String(), errb.String())
	}
}
