package dl

// Flag is a set of dlopen mode bits.
type Flag int

// Mode bits of dlopen, with glibc's values.
const (
	// Lazy resolves functions of the library when they are first called.
	Lazy Flag = 0x00001
	// Now resolves every undefined symbol of the library at Open.
	Now Flag = 0x00002
	// Global makes the library's symbols available to libraries opened later.
	Global Flag = 0x00100
	// Local keeps the library's symbols to itself (the default).
	Local Flag = 0
	// NoDelete keeps the library mapped after its last Close.
	NoDelete Flag = 0x01000
)
