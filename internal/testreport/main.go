// Command testreport runs the tiers of `make test` and tells the truth about them: how
// long each took against its budget, the total against the suite's 15 minutes, and
// every suite that did not run, why, and the command that makes it run.
//
//	testreport start                                  forget the records of an earlier run
//	testreport run -tier NAME -budget SECONDS [-json] [-show REGEXP] -- COMMAND [ARG...]
//	testreport summary [-tiers "NAME ..."]            print the report; fail where CI must
//
// run executes COMMAND, records its tier's time and outcome, and exits with the
// command's status. With -json, COMMAND's standard output is `go test -json` (lines that
// are not JSON, such as go vet's, pass through): testreport prints what a plain `go test`
// would (a line per package, the output of failing tests), every skip marked "SKIP:", and
// the output lines that match -show (seeds, crash-point counts).
//
// The skip convention: a test that cannot run here skips with a message that starts
// with "SKIP:" and says how to enable it (package internal/testkit writes it so). A test
// skipped in one tier and run in another (the storage fault injection skips under -short
// and runs in its own tier) is not a skipped suite; one skipped in every tier is. Under
// CI=true, summary fails when any suite was skipped (.ci/run provisions every suite) or
// when the total exceeds the budget. Skips without the "SKIP:" mark (a property test
// discarding an input it cannot use) are not suites and are not reported.
//
// Records live in the directory named by TESTREPORT_DIR (default .test-report), so that
// the tiers, which make runs one after another, can be summed up at the end.
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
)

// TotalBudget is the whole of `make test`: CI fails beyond it.
const TotalBudget = 15 * time.Minute

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: testreport start | run -tier NAME -budget SECONDS [-json] [-show RE] -- CMD... | summary")
		os.Exit(2)
	}
	dir := os.Getenv("TESTREPORT_DIR")
	if dir == "" {
		dir = ".test-report"
	}
	var err error
	code := 0
	switch os.Args[1] {
	case "start":
		err = start(dir, time.Now())
	case "run":
		code, err = run(dir, os.Args[2:], os.Stdout)
	case "summary":
		fs := flag.NewFlagSet("summary", flag.ExitOnError)
		tiers := fs.String("tiers", "", "the tiers a whole run has, to say which did not run")
		fs.Parse(os.Args[2:])
		var ok bool
		ok, err = summary(dir, time.Now(), os.Getenv("CI") == "true", strings.Fields(*tiers), os.Stdout)
		if !ok {
			code = 1
		}
	default:
		err = fmt.Errorf("unknown command %q: want start, run or summary", os.Args[1])
		code = 2
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "testreport:", err)
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}

// tierRecord is one line of tiers.jsonl.
type tierRecord struct {
	Tier    string  `json:"tier"`
	Seconds float64 `json:"seconds"`
	Budget  float64 `json:"budget"`
	OK      bool    `json:"ok"`
}

// testRecord is one line of tests.jsonl: a test that passed or skipped in a tier.
type testRecord struct {
	Tier    string `json:"tier"`
	Package string `json:"package"`
	Test    string `json:"test"`
	Skipped bool   `json:"skipped,omitempty"`
	// Reason is the skip message from "SKIP:" on (empty for a pass, and for a skip
	// without the mark).
	Reason string `json:"reason,omitempty"`
}

func start(dir string, now time.Time) error {
	if err := os.RemoveAll(filepath.Join(dir, "records")); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(dir, "records"), 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "records", "start"), []byte(strconv.FormatInt(now.UnixMilli(), 10)), 0o644)
}

func run(dir string, args []string, out io.Writer) (int, error) {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	tier := fs.String("tier", "", "the tier's `NAME`")
	budget := fs.Float64("budget", 0, "the tier's budget in `SECONDS`")
	asJSON := fs.Bool("json", false, "the command's stdout is go test -json")
	show := fs.String("show", "", "also print test output lines matching `REGEXP`")
	if err := fs.Parse(args); err != nil {
		return 2, err
	}
	cmdArgs := fs.Args()
	if *tier == "" || *budget <= 0 || len(cmdArgs) == 0 {
		return 2, errors.New("run needs -tier, -budget and a command after --")
	}
	var showRE *regexp.Regexp
	if *show != "" {
		var err error
		if showRE, err = regexp.Compile(*show); err != nil {
			return 2, fmt.Errorf("-show: %w", err)
		}
	}
	if err := os.MkdirAll(filepath.Join(dir, "records"), 0o755); err != nil {
		return 1, err
	}

	began := time.Now()
	cmd := exec.Command(cmdArgs[0], cmdArgs[1:]...)
	cmd.Stdin = os.Stdin
	cmd.Stderr = os.Stderr
	var f *filter
	if *asJSON {
		pipe, err := cmd.StdoutPipe()
		if err != nil {
			return 1, err
		}
		f = newFilter(*tier, showRE, out)
		if err := cmd.Start(); err != nil {
			return 1, fmt.Errorf("start %s: %w", cmdArgs[0], err)
		}
		if err := f.read(pipe); err != nil {
			return 1, err
		}
	} else {
		cmd.Stdout = out
		if err := cmd.Start(); err != nil {
			return 1, fmt.Errorf("start %s: %w", cmdArgs[0], err)
		}
	}
	code := 0
	if err := cmd.Wait(); err != nil {
		var exit *exec.ExitError
		if !errors.As(err, &exit) {
			return 1, err
		}
		code = max(exit.ExitCode(), 1)
	}
	if f != nil && f.failed && code == 0 {
		code = 1
	}
	took := time.Since(began)
	rec := tierRecord{Tier: *tier, Seconds: took.Seconds(), Budget: *budget, OK: code == 0}
	if err := appendJSON(filepath.Join(dir, "records", "tiers.jsonl"), rec); err != nil {
		return 1, err
	}
	if f != nil {
		if err := appendJSON(filepath.Join(dir, "records", "tests.jsonl"), f.tests...); err != nil {
			return 1, err
		}
	}
	status := "ok"
	if code != 0 {
		status = "FAILED"
	}
	over := ""
	if took.Seconds() > *budget {
		over = " — over budget"
	}
	fmt.Fprintf(out, "tier %s: %s in %.0fs (budget %.0fs)%s\n", *tier, status, took.Seconds(), *budget, over)
	return code, nil
}

func appendJSON[T any](path string, recs ...T) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	enc := json.NewEncoder(f)
	for _, r := range recs {
		if err := enc.Encode(r); err != nil {
			f.Close()
			return err
		}
	}
	return f.Close()
}

// event is one line of `go test -json` (cmd/test2json).
type event struct {
	Action  string
	Package string
	Test    string
	Elapsed float64
	Output  string
}

// filter turns go test -json into what a person reads, and collects the tests that
// passed or skipped.
type filter struct {
	tier   string
	show   *regexp.Regexp
	out    io.Writer
	output map[string][]string // (package, test) → output lines, until the test ends
	tests  []testRecord
	failed bool
}

func newFilter(tier string, show *regexp.Regexp, out io.Writer) *filter {
	return &filter{tier: tier, show: show, out: out, output: map[string][]string{}}
}

func (f *filter) read(r io.Reader) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var ev event
		if len(line) == 0 || line[0] != '{' || json.Unmarshal(line, &ev) != nil || ev.Action == "" {
			fmt.Fprintf(f.out, "%s\n", line) // go vet, a build error, anything else
			continue
		}
		f.handle(ev)
	}
	return sc.Err()
}

func (f *filter) handle(ev event) {
	key := ev.Package + "\x00" + ev.Test
	switch ev.Action {
	case "output", "build-output":
		if ev.Action == "build-output" || ev.Test == "" && strings.HasPrefix(ev.Output, "FAIL") {
			fmt.Fprint(f.out, ev.Output)
			return
		}
		if f.show != nil && f.show.MatchString(ev.Output) {
			fmt.Fprint(f.out, ev.Output)
		}
		f.output[key] = append(f.output[key], ev.Output)
	case "pass":
		delete(f.output, key)
		if ev.Test == "" {
			fmt.Fprintf(f.out, "ok  \t%s\t%.3fs\n", ev.Package, ev.Elapsed)
			return
		}
		f.tests = append(f.tests, testRecord{Tier: f.tier, Package: ev.Package, Test: ev.Test})
	case "skip":
		lines := f.output[key]
		delete(f.output, key)
		if ev.Test == "" {
			return // a package without tests
		}
		reason := skipReason(lines)
		if reason != "" {
			fmt.Fprintf(f.out, "--- SKIP: %s %s: %s\n", ev.Package, ev.Test, reason)
		}
		f.tests = append(f.tests, testRecord{Tier: f.tier, Package: ev.Package, Test: ev.Test, Skipped: true, Reason: reason})
	case "fail", "build-fail":
		f.failed = true
		lines := f.output[key]
		delete(f.output, key)
		if ev.Test == "" {
			// What a failed package printed outside any test (a panic in TestMain, a
			// timeout's goroutine dump) comes before its FAIL line.
			fmt.Fprint(f.out, strings.Join(lines, ""))
			fmt.Fprintf(f.out, "FAIL\t%s\t%.3fs\n", ev.Package, ev.Elapsed)
			return
		}
		fmt.Fprint(f.out, strings.Join(lines, ""))
	}
}

// skipReason finds the "SKIP:" mark in a skipped test's output and returns the message
// from there on, or "" when the skip is unmarked.
func skipReason(lines []string) string {
	for _, l := range lines {
		if strings.HasPrefix(strings.TrimSpace(l), "--- SKIP") {
			continue // go test's own line for every skip
		}
		if _, after, ok := strings.Cut(l, "SKIP: "); ok {
			return strings.TrimSpace(after)
		}
	}
	return ""
}

// summary prints the report of the run recorded in dir; want lists the tiers of a whole
// run (empty: whatever ran). It reports whether the run passed.
func summary(dir string, now time.Time, ci bool, want []string, out io.Writer) (bool, error) {
	recDir := filepath.Join(dir, "records")
	raw, err := os.ReadFile(filepath.Join(recDir, "start"))
	if err != nil {
		return false, fmt.Errorf("no run recorded (testreport start first): %w", err)
	}
	ms, err := strconv.ParseInt(strings.TrimSpace(string(raw)), 10, 64)
	if err != nil {
		return false, fmt.Errorf("%s/start: %w", recDir, err)
	}
	total := now.Sub(time.UnixMilli(ms))
	tiers, err := readJSON[tierRecord](filepath.Join(recDir, "tiers.jsonl"))
	if err != nil {
		return false, err
	}
	tests, err := readJSON[testRecord](filepath.Join(recDir, "tests.jsonl"))
	if err != nil {
		return false, err
	}

	ok := true
	fmt.Fprintln(out, "")
	fmt.Fprintln(out, "make test: summary")
	for _, t := range tiers {
		status := "ok"
		if !t.OK {
			status = "FAILED"
			ok = false
		}
		over := ""
		if t.Seconds > t.Budget {
			over = "  over budget"
		}
		fmt.Fprintf(out, "  %-12s %-6s %5.0fs of %4.0fs%s\n", t.Tier, status, t.Seconds, t.Budget, over)
	}
	overTotal := total > TotalBudget
	fmt.Fprintf(out, "  %-12s %-6s %5.0fs of %4.0fs\n", "total", map[bool]string{true: "OVER", false: "ok"}[overTotal], total.Seconds(), TotalBudget.Seconds())
	ran := map[string]bool{}
	for _, t := range tiers {
		ran[t.Tier] = true
	}
	var notRun []string
	for _, t := range want {
		if !ran[t] {
			notRun = append(notRun, t)
		}
	}
	if len(notRun) > 0 {
		ok = false
		fmt.Fprintf(out, "  not run: %s (a tier before them failed; skips below include tests those tiers run)\n", strings.Join(notRun, ", "))
	}

	skipped := unresolvedSkips(tests)
	if len(skipped) == 0 {
		fmt.Fprintln(out, "  skipped suites: none")
	} else {
		fmt.Fprintf(out, "  skipped suites (%d reasons):\n", len(skipped))
		for _, s := range skipped {
			fmt.Fprintf(out, "    SKIP %s\n      %d test(s): %s\n", s.reason, len(s.tests), strings.Join(abbreviate(s.tests, 6), ", "))
		}
	}
	if ci && len(skipped) > 0 {
		fmt.Fprintln(out, "make test: FAILED: under CI=true no suite may skip (.ci/run provisions every one)")
		ok = false
	}
	if ci && overTotal {
		fmt.Fprintf(out, "make test: FAILED: the whole run took %s, past the %s budget\n", total.Round(time.Second), TotalBudget)
		ok = false
	}
	if ok {
		fmt.Fprintln(out, "make test: all tiers passed")
	}
	return ok, nil
}

type skipGroup struct {
	reason string
	tests  []string
}

// unresolvedSkips groups, by reason, the marked skips of tests that no tier ran.
func unresolvedSkips(tests []testRecord) []skipGroup {
	ran := map[string]bool{}
	for _, t := range tests {
		if !t.Skipped {
			ran[t.Package+"\x00"+t.Test] = true
		}
	}
	byReason := map[string]map[string]bool{}
	for _, t := range tests {
		if !t.Skipped || t.Reason == "" || ran[t.Package+"\x00"+t.Test] {
			continue
		}
		if byReason[t.Reason] == nil {
			byReason[t.Reason] = map[string]bool{}
		}
		byReason[t.Reason][shortPkg(t.Package)+"."+t.Test] = true
	}
	var groups []skipGroup
	for reason, set := range byReason {
		g := skipGroup{reason: reason}
		for name := range set {
			g.tests = append(g.tests, name)
		}
		sort.Strings(g.tests)
		groups = append(groups, g)
	}
	sort.Slice(groups, func(i, j int) bool { return groups[i].reason < groups[j].reason })
	return groups
}

func shortPkg(p string) string { return strings.TrimPrefix(p, "github.com/okiba/okiba/") }

func abbreviate(names []string, n int) []string {
	if len(names) <= n {
		return names
	}
	return append(names[:n:n], fmt.Sprintf("and %d more", len(names)-n))
}

func readJSON[T any](path string) ([]T, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var recs []T
	for i, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		if line == "" {
			continue
		}
		var r T
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, i+1, err)
		}
		recs = append(recs, r)
	}
	return recs, nil
}
