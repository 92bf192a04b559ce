package buildinfo

import (
	"runtime"
	"runtime/debug"
	"testing"
)

func TestResolve(t *testing.T) {
	vcs := &debug.BuildInfo{
		GoVersion: "go1.0",
		Main:      debug.Module{Version: "(devel)"},
		Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "0123456789abcdef0123456789abcdef01234567"},
			{Key: "vcs.time", Value: "2025-03-04T05:06:07Z"},
			{Key: "vcs.modified", Value: "true"},
		},
	}
	for _, tc := range []struct {
		name                              string
		version, commit, commitTime, mod  string
		bi                                *debug.BuildInfo
		wantVersion, wantCommit, wantTime string
		wantModified                      bool
	}{
		{name: "nothing known", wantVersion: "devel"},
		{name: "a checkout's build", bi: vcs, wantVersion: "devel",
			wantCommit: "0123456789abcdef0123456789abcdef01234567", wantTime: "2025-03-04T05:06:07Z", wantModified: true},
		// make release: the stamps win over what the build information says.
		{name: "stamped", version: "v1.2.3", commit: "feedfacefeedfacefeedfacefeedfacefeedface", commitTime: "1700000000", bi: vcs,
			wantVersion: "v1.2.3", wantCommit: "feedfacefeedfacefeedfacefeedfacefeedface", wantTime: "2023-11-14T22:13:20Z"},
		{name: "go install module@version", bi: &debug.BuildInfo{Main: debug.Module{Version: "v0.9.1"}}, wantVersion: "v0.9.1"},
		{name: "unparsable stamped time", commitTime: "yesterday", wantVersion: "devel"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := resolve(tc.version, tc.commit, tc.commitTime, tc.mod, tc.bi)
			if b.Version != tc.wantVersion || b.Commit != tc.wantCommit || b.CommitTime != tc.wantTime || b.Modified != tc.wantModified {
				t.Errorf("got %+v", b)
			}
			if b.GoVersion != runtime.Version() {
				t.Errorf("go version %q, want the runtime's %q", b.GoVersion, runtime.Version())
			}
		})
	}
	if Short("0123456789abcdef") != "0123456789ab" || Short("abc") != "abc" {
		t.Error("Short")
	}
}
