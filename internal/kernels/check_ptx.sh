#!/bin/sh
# check_ptx.sh regenerates the PTX and the cubins into a temporary directory
# and fails if they differ from the committed files in ptx/ and cubin/ (or
# if a file has no source). Without nvcc it says so and succeeds: the check
# needs the toolkit that generated the files (nvcc and ptxas 11.8).
set -eu
cd "$(dirname "$0")"
exec ../ptxgen/check.sh ptx cubin *.cu
