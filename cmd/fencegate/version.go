package main

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
)

// commit is the commit the binary was built from, for builds that record no
// version-control information themselves (-buildvcs=false); "make build"
// sets it with -ldflags "-X main.commit=…".
var commit string

// versionLine describes this binary in one line: the module version (a tag
// when installed with "go install …@vX.Y.Z", "(devel)" for a build from a
// checkout), the commit it was built from when the build recorded one (with
// "+dirty" for uncommitted changes), and the Go version.
func versionLine() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "fencegate (unknown version) " + runtime.Version()
	}
	return versionFrom(info)
}

// versionFrom is versionLine for given build information.
func versionFrom(info *debug.BuildInfo) string {
	version := info.Main.Version
	if version == "" {
		version = "(devel)"
	}
	var rev, when string
	dirty := false
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			when = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev == "" && commit != "" {
		rev = commit
	}
	line := "fencegate " + version
	if rev != "" {
		if len(rev) > 12 {
			rev = rev[:12]
		}
		line += " commit " + rev
		if dirty {
			line += "+dirty"
		}
		if when != "" {
			line += " (" + when + ")"
		}
	}
	goVersion := info.GoVersion
	if goVersion == "" {
		goVersion = runtime.Version()
	}
	return line + " " + goVersion
}

func printVersion(w io.Writer) { fmt.Fprintln(w, versionLine()) }

func init() {
	register(&command{
		name:    "version",
		summary: "print the version, commit and Go version of this binary",
		run: func(_ context.Context, args []string, stdout, stderr io.Writer) error {
			if len(args) > 0 {
				return usagef("version takes no arguments")
			}
			printVersion(stdout)
			return nil
		},
	})
}
