package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// replot draws the charts of the summary.json named by -replot into -out
// (by default the summary's directory) without running anything: the
// model comes from the summary; the planner's chart is drawn for the
// summary's d.
func replot(o options, w io.Writer) error {
	b, err := os.ReadFile(o.replot)
	if err != nil {
		return err
	}
	var s summary
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("%s: %w", o.replot, err)
	}
	if s.World < 1 || s.Model.Validate() != nil {
		return fmt.Errorf("%s: no run of a model on at least one rank (world %d, model %+v)", o.replot, s.World, s.Model)
	}
	o.gpt = s.Model
	if o.out == "" {
		o.out = filepath.Dir(o.replot)
	}
	files, err := writeCharts(o, &s)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "wrote %s\n", strings.Join(files, ", "))
	return nil
}
