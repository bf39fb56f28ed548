package main

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
)

const versionUsage = `
Usage: floodgate version

Prints the module version, the VCS revision and commit time, and the Go
version the binary was built with, from its build information. The same as
"floodgate --version".
`

// Stamped at link time by builds without VCS information (the Containerfile,
// scripts/release.sh): -ldflags "-X main.version=v1.2.3 -X main.revision=…
// -X main.revisionTime=…". Empty values fall back to the build information.
var (
	version      string
	revision     string
	revisionTime string
)

// buildVersion is what "floodgate version" reports.
type buildVersion struct {
	Module   string // module path
	Version  string // module version, "(devel)" for an unstamped local build
	Revision string // VCS revision, "unknown" when not recorded
	Time     string // VCS commit time (RFC 3339), "unknown" when not recorded
	Modified bool   // the work tree had uncommitted changes
	Go       string // Go version, OS and architecture
}

// readBuildVersion reads the binary's build information; link-time values
// take precedence.
func readBuildVersion() buildVersion {
	v := buildVersion{
		Module:   "github.com/floodgate-go/floodgate",
		Version:  "(devel)",
		Revision: "unknown",
		Time:     "unknown",
		Go:       runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH,
	}
	if info, ok := debug.ReadBuildInfo(); ok {
		if info.Main.Path != "" {
			v.Module = info.Main.Path
		}
		if info.Main.Version != "" {
			v.Version = info.Main.Version
		}
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				v.Revision = s.Value
			case "vcs.time":
				v.Time = s.Value
			case "vcs.modified":
				v.Modified = s.Value == "true"
			}
		}
	}
	if version != "" {
		v.Version = version
	}
	if revision != "" {
		v.Revision = revision
	}
	if revisionTime != "" {
		v.Time = revisionTime
	}
	return v
}

func (v buildVersion) write(w io.Writer) {
	rev := v.Revision
	if v.Modified {
		rev += " (modified)"
	}
	fmt.Fprintf(w, "floodgate %s\nmodule:   %s\nrevision: %s\ntime:     %s\ngo:       %s\n",
		v.Version, v.Module, rev, v.Time, v.Go)
}

func (m *Main) version(_ context.Context, args []string) int {
	fs := m.flagSet("version", versionUsage)
	if code, ok := m.parseArgs(fs, args); !ok {
		return code
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(m.Stderr, "floodgate version: unexpected argument %q\n", fs.Arg(0))
		return exitUsage
	}
	readBuildVersion().write(m.Stdout)
	return exitOK
}
