package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/okiba/okiba/api"
	"github.com/okiba/okiba/internal/testkit"
)

// complete loads okiba's bash completion script into bash and returns the words it
// offers for line, where the cursor is at the end (a trailing space starts a new word).
// okiba in the line is this test binary acting as the command (TestMain), so that the
// script's queue names come from the harness's server.
func complete(t *testing.T, script, server, line string) []string {
	t.Helper()
	bash, err := exec.LookPath("bash")
	if err != nil {
		testkit.Missing(t, "the completion test", "no bash in PATH", "apt-get install bash")
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	words := strings.Fields(line)
	if strings.HasSuffix(line, " ") {
		words = append(words, "")
	}
	words[0] = self
	var quoted []string
	for _, w := range words {
		quoted = append(quoted, "'"+strings.ReplaceAll(w, "'", `'\''`)+"'")
	}
	prog := "source " + script + "\nCOMP_WORDS=(" + strings.Join(quoted, " ") + ")\nCOMP_CWORD=" +
		strconv.Itoa(len(words)-1) + "\n_okiba\nprintf '%s\\n' \"${COMPREPLY[@]}\"\n"
	cmd := exec.Command(bash, "--norc", "--noprofile", "-c", prog)
	cmd.Env = append(os.Environ(), "OKIBA_TEST_AS_OKIBA=1", "OKIBA_SERVER="+server)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("bash: %v\n%s", err, out)
	}
	var got []string
	for _, w := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if w != "" {
			got = append(got, w)
		}
	}
	slices.Sort(got)
	return got
}

// TestCompletionBash sources the script okiba completion bash prints and asks its
// completion function what it offers: commands, subcommands, a command's own flags
// (not another's), nothing for a flag's value, the shells, and the server's queues.
func TestCompletionBash(t *testing.T) {
	h := newHarness(t)
	script := filepath.Join(t.TempDir(), "okiba.bash")
	if err := os.WriteFile(script, []byte(h.ok("completion", "bash")), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{"orders", "orders-eu", "payments"} {
		if _, err := h.srv.Client.PutQueue(t.Context(), q, api.QueueConfig{}); err != nil {
			t.Fatal(err)
		}
	}
	cases := []struct {
		line string
		want []string
	}{
		{"okiba qu", []string{"queue"}},
		{"okiba de", []string{"deadletter", "defer", "demo"}},
		{"okiba queue ", []string{"create", "delete", "get", "list", "purge", "update"}},
		{"okiba queue create orders --vis", []string{"--visibility-timeout"}},
		{"okiba queue create --server http://x orders --max-d", []string{"--max-deliveries"}},
		{"okiba send --gr", []string{"--group"}},
		{"okiba topic create t --vis", nil}, // a queue's flag is not a topic's
		{"okiba recv orders --wait ", nil},  // a flag's value
		{"okiba completion ", []string{"bash", "fish", "zsh"}},
		{"okiba help que", []string{"queue"}},
		{"okiba send ord", []string{"orders", "orders-dlq", "orders-eu", "orders-eu-dlq"}},
		{"okiba queue purge --server http://x --yes p", []string{"payments", "payments-dlq"}}, // a flag's value is no argument
		{"okiba send orders ", nil},                                                           // the body is no queue
	}
	for _, c := range cases {
		if got := complete(t, script, h.srv.URL, c.line); !slices.Equal(got, c.want) {
			t.Errorf("%q completes to %q, want %q", c.line, got, c.want)
		}
	}
}

// TestCompletionScripts checks that every shell's script names every command and that
// an unknown shell is a usage error naming the closest.
func TestCompletionScripts(t *testing.T) {
	h := newHarness(t)
	for _, sh := range shells {
		out := h.ok("completion", sh)
		for _, e := range (&app{}).commands() {
			if !strings.Contains(out, e.name) {
				t.Errorf("the %s script lacks the command %s", sh, e.name)
			}
		}
		if !strings.Contains(out, "visibility-timeout") {
			t.Errorf("the %s script lacks queue create's --visibility-timeout", sh)
		}
	}
	r := h.fails(2, "completion", "bsh")
	if !strings.Contains(r.err, `did you mean "bash"?`) {
		t.Errorf("okiba completion bsh: %s", r.err)
	}
}
