package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// stubGPTLong stands in for scripts/gpu/gpt_long.sh in TestLossSeedsScript:
// it writes the loss part's curves of $SEED, copied from the committed gate
// (results/gate_seeds), into $OUT and packs them as gpt_long.sh does; seed
// 9 fails as a run that crashed.
const stubGPTLong = `#!/bin/sh
cd "$(dirname "$0")/../.."
[ "$SEED" = 9 ] && { echo "stub: seed 9 crashed"; exit 1; }
cp "$GATE/seed$SEED/"*.json "$OUT/"
echo "stub $SEED $BIN torch_other=[$TORCH_OTHER]" >"$OUT/gpt_long.log"
(cd "$OUT" && tar czf gpt_long_files.tgz *.json gpt_long.log && rm -f *.json)
`

// TestLossSeedsScript runs scripts/gpu/loss_seeds.sh's run mode against a
// stub of gpt_long.sh on the committed curves of seeds 2 and 3: it must
// print the same per-seed differences as curve.CheckSeeds computes from
// the files, leave seeds.tgz and seeds_diff.png in OUT and no seed folder,
// and fail, with the crashed seed's log, when a seed's runs are missing.
func TestLossSeedsScript(t *testing.T) {
	for _, tool := range []string{"sh", "tar", "gzip", "paste", "sort", "cut", "go"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("no %s: %v", tool, err)
		}
	}
	gate, err := filepath.Abs("../results/gate_seeds")
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(root, "scripts/gpu"), 0o755))
	must(os.MkdirAll(filepath.Join(root, "bin"), 0o755))
	script, err := os.ReadFile("../../../scripts/gpu/loss_seeds.sh")
	must(err)
	must(os.WriteFile(filepath.Join(root, "scripts/gpu/loss_seeds.sh"), script, 0o755))
	must(os.WriteFile(filepath.Join(root, "scripts/gpu/gpt_long.sh"), []byte(stubGPTLong), 0o755))
	if out, err := exec.Command("go", "build", "-o", filepath.Join(root, "bin/curves"), ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	runScript := func(seeds string) (string, error) {
		out := filepath.Join(root, "out"+strings.ReplaceAll(seeds, " ", ""))
		cmd := exec.Command("sh", "scripts/gpu/loss_seeds.sh", "run")
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "BIN=bin", "SEEDS="+seeds, "OUT="+out, "GATE="+gate)
		b, err := cmd.CombinedOutput()
		return string(b), err
	}

	text, err := runScript("2 3")
	if err != nil {
		t.Fatalf("seeds 2 and 3: %v\n%s", err, text)
	}
	var refs []string
	runs := map[string][]string{}
	for _, s := range []string{"2", "3"} {
		refs = append(refs, filepath.Join(gate, "seed"+s, "long_torch.json"))
		for _, r := range []string{"current", "delayed", "tile"} {
			runs[r] = append(runs[r], filepath.Join(gate, "seed"+s, "long_"+r+".json"))
		}
	}
	var want strings.Builder
	code := run([]string{"-seeds", "-steps", "2000", "-warmup", "100", "-ref", strings.Join(refs, ","),
		strings.Join(runs["current"], ","), strings.Join(runs["delayed"], ","), strings.Join(runs["tile"], ",")}, &want, os.Stderr)
	if code != 0 {
		t.Fatalf("curves -seeds on the committed files: exit %d\n%s", code, want.String())
	}
	table := regexp.MustCompile(`(?m)^long_\w+\.json .*$`)
	if got, exp := table.FindAllString(text, -1), table.FindAllString(want.String(), -1); len(exp) != 3 || strings.Join(got, "\n") != strings.Join(exp, "\n") {
		t.Errorf("the script's table:\n%s\nwant the rows of curves -seeds:\n%s", strings.Join(got, "\n"), strings.Join(exp, "\n"))
	}
	out := filepath.Join(root, "out23")
	for _, f := range []string{"seeds.tgz", "seeds_diff.png"} {
		if _, err := os.Stat(filepath.Join(out, f)); err != nil {
			t.Error(err)
		}
	}
	if left, _ := filepath.Glob(filepath.Join(out, "seed[0-9]*")); len(left) > 0 {
		t.Errorf("seed folders left in OUT: %v", left)
	}
	if list, err := exec.Command("tar", "tzf", filepath.Join(out, "seeds.tgz")).Output(); err != nil || !strings.Contains(string(list), "seed3/long_tile.json") || !strings.Contains(string(list), "seed2/gpt_long.log") {
		t.Errorf("seeds.tgz holds %q (%v)", list, err)
	}

	text, err = runScript("2 9")
	if err == nil || !strings.Contains(text, "seed 9 failed") || !strings.Contains(text, "stub: seed 9 crashed") {
		t.Errorf("a crashed seed: err %v\n%s", err, text)
	}
}
