#!/bin/sh
# build.sh (run on the build machine) compiles the GPU suite into .gpu/:
#   - one test binary per package whose tests use cuda/cudatest or
#     internal/cuda/cudatest (found automatically: a new GPU test package
#     needs no edit here), named after its import path:
#     .gpu/internal_kernels.test, .gpu/examples_gpt_kernels.test, ...;
#   - a race-detector build as well for the packages in $race_pkgs;
#   - the main packages in $cmds (benchmark programs) into .gpu/bin/;
#   - .gpu/manifest: one "binary package-directory" line per test binary,
#     and .gpu/commit: the commit and tree state built.
# Then carry .gpu to the GPU machine and run scripts/gpu/run.sh there.
set -eu
cd "$(dirname "$0")/../.."
race_pkgs=${RACE_PKGS-./internal/cuda}
cmds="./cmd/distopt-bench-update ./cmd/distopt-bench-gemm"

rm -rf .gpu/*.test .gpu/*.test.gz .gpu/bin .gpu/manifest .gpu/gemm
mkdir -p .gpu
module=$(go list -m)
pkgs=$(go list -f '{{.ImportPath}} {{join .TestImports " "}} {{join .XTestImports " "}}' ./... |
	awk -v m="$module/cuda/cudatest" -v im="$module/internal/cuda/cudatest" \
		'{ for (i = 2; i <= NF; i++) if ($i == m || $i == im) { print $1; break } }')
for p in $pkgs; do
	rel=${p#"$module"/}
	name=$(echo "$rel" | tr / _)
	echo "build: $rel -> .gpu/$name.test"
	go test -c -ldflags="-s -w" -o ".gpu/$name.test" "./$rel"
	echo "$name.test $rel" >>.gpu/manifest
	for r in $race_pkgs; do
		if [ "$r" = "./$rel" ]; then
			echo "build: $rel -> .gpu/$name.race.test (-race)"
			go test -race -c -o ".gpu/$name.race.test" "./$rel"
			echo "$name.race.test $rel" >>.gpu/manifest
		fi
	done
done
for c in $cmds; do
	mkdir -p .gpu/bin
	go build -o .gpu/bin/ "$c"
done
{
	git rev-parse HEAD
	git status --porcelain --untracked-files=no | sed 's/^/modified: /'
	date -u +%Y-%m-%dT%H:%M:%SZ
} >.gpu/commit
# The device tool carries at most 64 MiB: ship the binaries gzipped
# (run.sh unpacks them).
gzip -9f .gpu/*.test .gpu/bin/* 2>/dev/null || true
echo "build: done ($(wc -l <.gpu/manifest) test binaries, $(du -sh .gpu | cut -f1))"
