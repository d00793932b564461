package optimizer

import "strings"

// The package's sentinel errors carry no "optimizer: " prefix: every error
// returned wraps one in a message that starts with the prefix once.

// unprefixed is err without its leading "optimizer: ", for wrapping in a
// message that has the prefix already; errors.Is and errors.As see err.
type unprefixed struct{ err error }

func (u unprefixed) Error() string { return strings.TrimPrefix(u.err.Error(), "optimizer: ") }

func (u unprefixed) Unwrap() error { return u.err }
