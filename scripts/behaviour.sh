#!/bin/sh
# behaviour.sh [COMMIT]: prints what a refactoring must not change, for the
# working tree or for COMMIT (checked out into a temporary worktree): the
# state digests of examples/train (every recipe, three moment types, the
# overlapped pipeline) and the training and validation losses of the GPT
# example on the CPU (tiny shape, three recipes, a learning-rate schedule),
# hashed at full precision. Compare two commits with
#   sh scripts/behaviour.sh 73dfcd8 >a.txt; sh scripts/behaviour.sh >b.txt; diff a.txt b.txt
# About twenty seconds on two cores.
set -eu
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'git worktree remove --force "$tmp/src" 2>/dev/null || true; rm -rf "$tmp"' EXIT
src=.
if [ $# -ge 1 ]; then
	git worktree add -q --detach "$tmp/src" "$1"
	src=$tmp/src
fi
(cd "$src" && go build -o "$tmp/train" ./examples/train && go build -o "$tmp/gpt" ./examples/gpt &&
	go run ./examples/gpt/prepare -root "$(go env GOROOT)/src/strings" -out "$tmp/data" >/dev/null)
for r in current delayed block tile mx; do
	for m in fp32 fp8,bf16 fp8; do
		echo "== train -recipe $r -moments $m"
		"$tmp/train" -recipe $r -moments $m -state-digest -steps 30 2>&1 | grep "state digest" | sort
	done
done
echo "== train -overlap"
"$tmp/train" -overlap -state-digest -steps 30 2>&1 | grep "state digest" | sort
for r in current delayed tile; do
	echo "== gpt -recipe $r (sha256 of the losses, last training and validation loss)"
	"$tmp/gpt" -data "$tmp/data" -steps 30 -sample 0 -recipe $r -eval-every 10 -curve "$tmp/c.json" >/dev/null
	python3 -c "import json,hashlib,sys; d=json.load(open(sys.argv[1])); print(hashlib.sha256(repr((d['train'],d['valid'])).encode()).hexdigest(), d['train'][-1], d['valid'][-1])" "$tmp/c.json"
done
