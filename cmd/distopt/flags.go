package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
)

// underscoreAliases registers, for every flag of fs whose name contains a
// '-', the same flag spelled with '_' (torchrun takes both spellings:
// --nproc-per-node and --nproc_per_node). It returns the aliases' names.
func underscoreAliases(fs *flag.FlagSet) map[string]bool {
	var dashed []*flag.Flag
	fs.VisitAll(func(f *flag.Flag) {
		if strings.Contains(f.Name, "-") {
			dashed = append(dashed, f)
		}
	})
	aliases := map[string]bool{}
	for _, f := range dashed {
		name := strings.ReplaceAll(f.Name, "-", "_")
		fs.Var(f.Value, name, f.Usage) // the same Value: either spelling sets it
		aliases[name] = true
	}
	return aliases
}

// printFlags writes the flags of fs the way the usage lines spell them,
// "--name VALUE" followed by the usage and the default, leaving out the
// aliases (named on their flag's line).
func printFlags(w io.Writer, fs *flag.FlagSet, aliases map[string]bool) {
	fs.VisitAll(func(f *flag.Flag) {
		if aliases[f.Name] {
			return
		}
		value, usage := flag.UnquoteUsage(f)
		line := "  --" + f.Name
		if value != "" {
			line += " " + value
		}
		if alias := strings.ReplaceAll(f.Name, "-", "_"); aliases[alias] {
			line += "  (or --" + alias + ")"
		}
		if f.DefValue != "" && f.DefValue != "0" && f.DefValue != "false" {
			usage += fmt.Sprintf(" (default %s)", f.DefValue)
		}
		fmt.Fprintf(w, "%s\n    \t%s\n", line, usage)
	})
}

// parseFlags parses args with fs. Asked for help (-h, --help), the usage
// goes to stdout, as the user asked to see it; the usage of a parse error
// goes to fs's output (stderr). Usage functions must write to fs.Output().
func parseFlags(fs *flag.FlagSet, args []string) error {
	errOut := fs.Output()
	var buf bytes.Buffer
	fs.SetOutput(&buf)
	err := fs.Parse(args)
	fs.SetOutput(errOut)
	w := errOut
	if errors.Is(err, flag.ErrHelp) {
		w = stdout
	}
	_, _ = buf.WriteTo(w)
	return err
}
