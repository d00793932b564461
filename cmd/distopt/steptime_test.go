package main

import (
	"bytes"
	"io"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// `distopt plan -steptime h200` prints a flat row per d and a row of
// groups of a node where d spans several; comm is the reduce-scatter plus
// the all-gather; the all-gather of groups of 8 is that of d = 8 (the
// gather stays in the node) and the groups' update that of d = 8 (the
// same shard); and the chart is written.
func TestPlanStepTime(t *testing.T) {
	chart := filepath.Join(t.TempDir(), "steps.png")
	var out, errb bytes.Buffer
	if st := runPlan([]string{"-model", "gpt-1.3b", "-steptime", "h200", "-d", "8,64,1024", "-steptime-chart", chart}, &out, &errb); st != 0 {
		t.Fatalf("status %d: %s", st, errb.String())
	}
	type row struct{ rs, update, ag, comm float64 }
	rows := map[string]row{}
	for _, line := range strings.Split(out.String(), "\n") {
		f := strings.Fields(line)
		if len(f) < 12 {
			continue
		}
		if _, err := strconv.Atoi(f[0]); err != nil {
			continue
		}
		v := func(i int) float64 { x, _ := strconv.ParseFloat(f[len(f)-12+i], 64); return x }
		label := f[0] + " " + strings.Join(f[1:len(f)-10], " ")
		rows[label] = row{rs: v(2), update: v(4), ag: v(7), comm: v(8)}
	}
	want := []string{"8 flat", "64 flat", "64 8 groups x 8", "1024 flat", "1024 128 groups x 8"}
	if len(rows) != len(want) {
		t.Fatalf("rows %v, want %v:\n%s", rows, want, out.String())
	}
	for _, k := range want {
		r, ok := rows[k]
		if !ok {
			t.Fatalf("no row %q:\n%s", k, out.String())
		}
		if d := r.rs + r.ag - r.comm; d > 0.011 || d < -0.011 {
			t.Errorf("%s: comm %v is not reduce-scatter %v + all-gather %v", k, r.comm, r.rs, r.ag)
		}
	}
	for _, k := range []string{"64 8 groups x 8", "1024 128 groups x 8"} {
		if rows[k].ag != rows["8 flat"].ag || rows[k].update != rows["8 flat"].update {
			t.Errorf("%s: all-gather %v update %v, want d=8's %v %v", k, rows[k].ag, rows[k].update, rows["8 flat"].ag, rows["8 flat"].update)
		}
		if rows[k].rs <= rows["8 flat"].rs {
			t.Errorf("%s: the reduce-scatter %v does not add the all-reduce across nodes to d=8's %v", k, rows[k].rs, rows["8 flat"].rs)
		}
	}
	if !strings.Contains(out.String(), "wrote "+chart) {
		t.Errorf("no chart written:\n%s", out.String())
	}
	if st := runPlan([]string{"-steptime", "tpu"}, io.Discard, &errb); st != 2 || !strings.Contains(errb.String(), `unknown cluster "tpu"`) {
		t.Errorf("-steptime tpu: status %d, %s", st, errb.String())
	}
}
