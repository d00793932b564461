#!/usr/bin/env bash
# Fuzz: every Go fuzz target of the module (go test -list '^Fuzz'), each
# for a bounded time. The seed corpora already run with `go test ./...`;
# this explores beyond them. A failure leaves the input that caused it in
# the package's testdata/fuzz/FUZZNAME/; commit it with the fix, where it
# becomes a regression case of `go test`.
#
#   scripts/ci/fuzz.sh                          # FUZZTIME=20s per target
#   FUZZTIME=5m scripts/ci/fuzz.sh              # longer
#   FUZZTIME=1m scripts/ci/fuzz.sh ./collective/rendezvous   # some packages
set -euo pipefail
cd "$(dirname "$0")/../.."
fuzztime=${FUZZTIME:-20s}
if [ $# -eq 0 ]; then set -- ./...; fi
list=$(go test -list '^Fuzz' "$@")
names=()
failed=()
count=0
while IFS= read -r line; do
  case "$line" in
  Fuzz*) names+=("$line") ;;
  ok* | FAIL* | "?"*)
    pkg=$(awk '{print $2}' <<<"$line")
    case "$line" in FAIL*) echo "listing $pkg failed"; failed+=("$pkg"); names=(); continue ;; esac
    for name in "${names[@]}"; do
      count=$((count + 1))
      echo "== fuzz $pkg $name ($fuzztime)"
      start=$SECONDS
      outcome=fail
      for attempt in 1 2; do
        if go test -run '^$' -fuzz "^${name}\$" -fuzztime "$fuzztime" "$pkg" >/tmp/fuzz.$$.log 2>&1; then
          outcome=pass
          break
        fi
        # Go's fuzzing coordinator can fail a target at the end of -fuzztime
        # with a bare "context deadline exceeded" and no input written (a
        # race on a loaded machine, golang/go#51484): that is no finding.
        # Run it once more; a real finding writes its input and fails.
        if grep -q 'Failing input written to' /tmp/fuzz.$$.log ||
          ! grep -q '^    context deadline exceeded$' /tmp/fuzz.$$.log; then
          outcome=fail
          break
        fi
        outcome=deadline
      done
      case $outcome in
      pass) echo "   no finding in $fuzztime ($((SECONDS - start)) s with the build)" ;;
      deadline) echo "   no finding: twice Go's bare deadline at the end of -fuzztime, no input written (golang/go#51484)" ;;
      fail)
        tail -40 /tmp/fuzz.$$.log
        echo "   FAILED: the input is in $(go list -f '{{.Dir}}' "$pkg")/testdata/fuzz/$name/"
        failed+=("$pkg $name")
        ;;
      esac
    done
    names=()
    ;;
  esac
done <<<"$list"
rm -f /tmp/fuzz.$$.log
echo "== fuzz: $count targets, ${#failed[@]} failed"
if [ ${#failed[@]} -gt 0 ]; then
  printf '   %s\n' "${failed[@]}"
  exit 1
fi
