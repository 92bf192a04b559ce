// Package buildinfo says which okiba is running: the release version, the commit it was
// built from and that commit's date, and the Go version. okiba version prints it, the
// start-up line logs it, /healthz answers it and /metrics has it as okiba_build_info.
//
// A release (make release) stamps the three at link time, so that the binary does not
// depend on a .git directory being there, nor on the time of the build:
//
//	go build -trimpath -ldflags "-X github.com/okiba/okiba/internal/buildinfo.version=v1.2.3
//	  -X github.com/okiba/okiba/internal/buildinfo.commit=$(git rev-parse HEAD)
//	  -X github.com/okiba/okiba/internal/buildinfo.commitTime=$(git log -1 --format=%ct)"
//
// What is not stamped comes from the Go build information: the module version of
// `go install github.com/okiba/okiba/cmd/okiba@v1.2.3`, and the vcs.* settings of a build
// in a checkout (unless -buildvcs=false). A build with neither is version "devel".
package buildinfo

import (
	"runtime"
	"runtime/debug"
	"strconv"
	"sync"
	"time"

	"github.com/okiba/okiba/api"
)

// Set with -ldflags -X (see the package comment); empty when not.
var (
	version    string // the release, "v1.2.3"
	commit     string // the full hash of the commit
	commitTime string // the commit's time, in Unix seconds (SOURCE_DATE_EPOCH)
	modified   string // "true" when built from a tree with uncommitted changes
)

// Get returns this binary's build. It is read once: the answer never changes.
func Get() api.Build { return get() }

var get = sync.OnceValue(func() api.Build {
	bi, _ := debug.ReadBuildInfo()
	return resolve(version, commit, commitTime, modified, bi)
})

// resolve combines the stamped values with the build information bi (nil when the
// binary has none): a stamped value wins.
func resolve(version, commit, commitTime, modified string, bi *debug.BuildInfo) api.Build {
	b := api.Build{Version: version, Commit: commit, Modified: modified == "true", GoVersion: runtime.Version()}
	if sec, err := strconv.ParseInt(commitTime, 10, 64); err == nil {
		b.CommitTime = time.Unix(sec, 0).UTC().Format(time.RFC3339)
	}
	if bi != nil {
		if b.Version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			b.Version = bi.Main.Version
		}
		if b.GoVersion == "" {
			b.GoVersion = bi.GoVersion
		}
		for _, s := range bi.Settings {
			switch {
			case s.Key == "vcs.revision" && b.Commit == "":
				b.Commit = s.Value
			case s.Key == "vcs.time" && b.CommitTime == "":
				b.CommitTime = s.Value
			case s.Key == "vcs.modified" && commit == "":
				b.Modified = s.Value == "true"
			}
		}
	}
	if b.Version == "" {
		b.Version = "devel"
	}
	return b
}

// Short is the commit's hash cut to 12 characters, as logs and one-line output show it.
func Short(commit string) string {
	if len(commit) > 12 {
		return commit[:12]
	}
	return commit
}
