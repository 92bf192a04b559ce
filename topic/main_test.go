package topic

import (
	"flag"
	"os"
	"testing"
)

// TestMain raises rapid's steps per check (30 by default) and checks (100) unless the
// command line sets them: retention and segment boundaries need long histories to be met exactly.
func TestMain(m *testing.M) {
	flag.Parse()
	set := map[string]bool{}
	flag.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if !set["rapid.steps"] {
		_ = flag.Set("rapid.steps", "300")
	}
	if !set["rapid.checks"] {
		_ = flag.Set("rapid.checks", "600")
	}
	os.Exit(m.Run())
}
