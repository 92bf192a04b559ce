package console

import (
	"os/exec"
	"strings"
	"testing"
)

// TestConsoleImportsNeitherBrokerNorQueue: the console reads okiba through the native
// API's operations (Service) and acts through the Go client; nothing it is built from,
// directly or not, is the broker or the queue core. (Its tests may use them, to set up
// what the console then reads.)
func TestConsoleImportsNeitherBrokerNorQueue(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	deps := strings.Fields(string(out))
	if len(deps) == 0 || deps[len(deps)-1] != "github.com/okiba/okiba/internal/console" {
		t.Fatalf("go list -deps did not list this package last: %q", deps)
	}
	for _, dep := range deps {
		switch dep {
		case "github.com/okiba/okiba/broker", "github.com/okiba/okiba/queue", "github.com/okiba/okiba/internal/service":
			t.Errorf("the console is built on %s", dep)
		}
	}
}
