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

// stdout receives what the user asked to see (help, the version); a
// variable for the tests.
var stdout io.Writer = os.Stdout

// dispatch runs the subcommand named by args[0]. Asking for help ("help",
// "-h", "--help") prints the usage to stdout and returns 0; "help COMMAND"
// runs COMMAND -h. No command, or an unknown one, prints it to stderr and
// returns 2. "--version" is "version".
func dispatch(args []string, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return 2
	}
	switch args[0] {
	case "help", "-h", "-help", "--help":
		if len(args) > 1 && args[0] == "help" {
			return dispatch([]string{args[1], "-h"}, stderr)
		}
		usage(stdout)
		return 0
	case "-version", "--version":
		args[0] = "version"
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
	fmt.Fprintln(w, "\nRun 'distopt help COMMAND' (or 'distopt COMMAND --help') for the arguments of a command.")
}
