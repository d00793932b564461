// Package maintest runs a command's main function in a child process of its
// own test binary. A test then sees how the command ends: its exit status
// and what it printed.
package maintest
