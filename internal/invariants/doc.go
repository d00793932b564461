// Package invariants says whether expensive internal consistency checks are
// on: they are when the code is built with the build tag invariants
// (go test -tags invariants ./...). The checks never change a result; a
// failed check panics, naming what is wrong.
package invariants
