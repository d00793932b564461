package main

import (
	"fmt"
	"io"
	"runtime/debug"
)

func init() {
	commands["version"] = command{summary: "print the version of distopt and how it was built", run: func([]string) int {
		info, _ := debug.ReadBuildInfo()
		printVersion(stdout, info)
		return 0
	}}
}

// printVersion writes "distopt VERSION (commit C[, modified], TIME) GOVERSION"
// from the build information of the binary; the parts the build did not
// record are left out. A nil info (no build information) prints "distopt
// unknown".
func printVersion(w io.Writer, info *debug.BuildInfo) {
	if info == nil {
		fmt.Fprintln(w, "distopt unknown")
		return
	}
	settings := map[string]string{}
	for _, s := range info.Settings {
		settings[s.Key] = s.Value
	}
	line := "distopt " + info.Main.Version
	if rev := settings["vcs.revision"]; rev != "" {
		line += " (commit " + rev[:min(12, len(rev))]
		if settings["vcs.modified"] == "true" {
			line += ", modified"
		}
		if t := settings["vcs.time"]; t != "" {
			line += ", " + t
		}
		line += ")"
	}
	fmt.Fprintln(w, line, info.GoVersion)
}
