package nccl

import "fmt"

// Version is a release of NCCL.
type Version struct {
	Major, Minor, Patch int
}

// MinVersion is the oldest NCCL release the package accepts: 2.18.0. The
// binding passes ncclConfig_t in the layout of 2.18 (its last field,
// splitShare, appeared in 2.18), so that an accepted library reads exactly
// the fields it was given; everything else it uses is older (ncclBfloat16
// and ncclAvg 2.10, ncclGetLastError 2.13, non-blocking communicators and
// ncclCommFinalize 2.14, cgaClusterSize/minCTAs/maxCTAs/netName 2.17).
var MinVersion = Version{2, 18, 0}

// VersionFromCode decodes the integer of ncclGetVersion and NCCL_VERSION_CODE:
// major*1000 + minor*100 + patch up to 2.8, major*10000 + minor*100 + patch
// from 2.9 on (2.28.3 is 22803).
func VersionFromCode(code int) Version {
	if code < 10000 {
		return Version{code / 1000, code % 1000 / 100, code % 100}
	}
	return Version{code / 10000, code % 10000 / 100, code % 100}
}

// Code returns the integer NCCL uses for v (the inverse of VersionFromCode).
func (v Version) Code() int {
	if v.Major <= 2 && v.Minor <= 8 {
		return v.Major*1000 + v.Minor*100 + v.Patch
	}
	return v.Major*10000 + v.Minor*100 + v.Patch
}

// Less reports whether v is an older release than w.
func (v Version) Less(w Version) bool {
	if v.Major != w.Major {
		return v.Major < w.Major
	}
	if v.Minor != w.Minor {
		return v.Minor < w.Minor
	}
	return v.Patch < w.Patch
}

// String returns "major.minor.patch".
func (v Version) String() string { return fmt.Sprintf("%d.%d.%d", v.Major, v.Minor, v.Patch) }
