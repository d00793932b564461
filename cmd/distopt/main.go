package main

import (
	"fmt"
	"io"
	"os"
	"slices"
)

// command is one subcommand of distopt.
type command struct {
	summary string                  // one line for the usage message
	run     func(args []string) int // runs with the arguments after the name; returns the exit status
}

// commands maps each subcommand's name to its implementation. Each
// subcommand registers itself from the init function of its own file.
var commands = map[string]command{}

func main() {
	os.Exit(dispatch(os.Args[1:], os.Stderr))
}

// dispatch runs the subcommand named by args[0].
func dispatch(args []string, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "-help" || args[0] == "--help" || args[0] == "help" {
		usage(stderr)
		return 2
	}
	cmd, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "distopt: unknown command %q\n", args[0])
		usage(stderr)
		return 2
	}
	return cmd.run(args[1:])
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: distopt COMMAND [ARGUMENTS]\n\ncommands:")
	names := make([]string, 0, len(commands))
	for name := range commands {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		fmt.Fprintf(w, "  %-8s %s\n", name, commands[name].summary)
	}
	fmt.Fprintln(w, "\nRun 'distopt COMMAND -h' for the arguments of a command.")
}
