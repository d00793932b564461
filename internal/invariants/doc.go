// Package invariants says whether expensive internal consistency checks are
// on.
//
// They are on when the code is built with the build tag invariants:
//
//	go test -tags invariants ./...
//
// The checks never change a result. A failed check panics and names what is
// wrong.
package invariants
