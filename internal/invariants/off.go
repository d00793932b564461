//go:build !invariants

package invariants

// Enabled reports whether the build tag invariants is set.
const Enabled = false
