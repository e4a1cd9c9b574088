package main

import (
	"encoding/json"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"strings"
)

// Set at build time by scripts/package.sh:
//
//	-ldflags "-X main.version=1.2.3 -X main.commit=SHA -X main.date=2026-01-02T03:04:05Z"
//
// A plain `go build` or `go install` leaves them empty; buildInfo then takes
// what the Go toolchain recorded in the binary (the module version of a
// `go install ...@v1.2.3`, the VCS revision and time of a build in a
// checkout).
var version, commit, date string

// buildInfo is what `sluice version` prints.
type buildInfo struct {
	Version   string `json:"version"`
	Commit    string `json:"commit"`
	Date      string `json:"date"`
	GoVersion string `json:"go"`
	Platform  string `json:"platform"`
}

func readBuildInfo() buildInfo {
	b := buildInfo{Version: version, Commit: commit, Date: date,
		GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if bi, ok := debug.ReadBuildInfo(); ok {
		if b.Version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			b.Version = strings.TrimPrefix(bi.Main.Version, "v")
		}
		modified := false
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				if b.Commit == "" {
					b.Commit = s.Value
				}
			case "vcs.time":
				if b.Date == "" {
					b.Date = s.Value
				}
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
		if modified && commit == "" && b.Commit != "" {
			b.Commit += "-dirty"
		}
	}
	if b.Version == "" {
		b.Version = "dev"
	}
	if b.Commit == "" {
		b.Commit = "unknown"
	}
	if b.Date == "" {
		b.Date = "unknown"
	}
	return b
}

// versionMain is `sluice version [--json]`.
func versionMain(args []string, stdout, stderr io.Writer) int {
	asJSON := false
	for _, a := range args {
		switch a {
		case "--json", "-json":
			asJSON = true
		case "-h", "--help", "-help":
			fmt.Fprint(stdout, usage)
			return 0
		default:
			fmt.Fprintf(stderr, "sluice: version: unknown option %q (it takes --json)\n", a)
			return exitUsage
		}
	}
	b := readBuildInfo()
	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(b)
		return 0
	}
	fmt.Fprintf(stdout, "sluice %s\n  commit:   %s\n  built:    %s\n  go:       %s\n  platform: %s\n",
		b.Version, b.Commit, b.Date, b.GoVersion, b.Platform)
	return 0
}
