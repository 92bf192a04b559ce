package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/okiba/okiba/client"
)

// This file holds what every command shares: the flag set that accepts flags after
// positional arguments, the flag types, the client flags with their environment
// fall-backs, and output helpers.

// errHelp reports that a command printed its help on request; the exit status is 0.
var errHelp = errors.New("help requested")

// usageError is a mistake in the command line: exit status 2, with a pointer to -h.
type usageError struct {
	cmd string // "queue create"
	msg string
}

func (e *usageError) Error() string { return e.msg }

// exitError ends a command with a status after it has already reported why (for example
// the per-receipt failures of ack).
type exitError struct{ code int }

func (e *exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

// flags is a command's flag set together with its help text. parse accepts flags before,
// between and after positional arguments (okiba send orders hello --group g); "--" ends
// the flags, so a positional argument may start with a dash.
type flags struct {
	*flag.FlagSet
	app      *app
	cmd      string       // the command's name after "okiba", such as "queue create"
	usage    string       // synopsis and description, printed before the flags
	examples string       // printed after the flags
	conn     *clientFlags // --server and --token, for commands made by serverFlags
}

func (a *app) flags(cmd, usage, examples string) *flags {
	fs := flag.NewFlagSet("okiba "+cmd, flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors are reported by the caller, help by printHelp
	return &flags{FlagSet: fs, app: a, cmd: cmd, usage: usage, examples: examples}
}

// parse parses args and returns the positional arguments. On -h or --help it prints the
// help to stdout and returns errHelp.
func (f *flags) parse(args []string) ([]string, error) {
	if f.app.collect != nil {
		f.app.collect(f)
		return nil, errHelp
	}
	var pos []string
	for {
		err := f.Parse(args)
		if errors.Is(err, flag.ErrHelp) {
			f.printHelp(f.app.Stdout)
			return nil, errHelp
		}
		if err != nil {
			return nil, f.fail("%s", f.explain(err))
		}
		rest := f.Args()
		if used := len(args) - len(rest); used > 0 && args[used-1] == "--" {
			return append(pos, rest...), nil
		}
		if len(rest) == 0 {
			return pos, nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// explain rewords the flag package's error for an unknown flag, naming the closest
// flag of this command when one is close.
func (f *flags) explain(err error) string {
	name, ok := strings.CutPrefix(err.Error(), "flag provided but not defined: ")
	if !ok {
		return err.Error()
	}
	name = strings.TrimLeft(name, "-")
	var names []string
	f.VisitAll(func(fl *flag.Flag) { names = append(names, fl.Name) })
	if s := didYouMean(name, names); s != "" {
		return fmt.Sprintf("unknown flag --%s (did you mean --%s?)", name, s)
	}
	return fmt.Sprintf("unknown flag --%s", name)
}

// given reports which flags were set on the command line.
func (f *flags) given() map[string]bool {
	set := map[string]bool{}
	f.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	return set
}

// fail returns a usage error for this command.
func (f *flags) fail(format string, args ...any) error {
	return &usageError{cmd: f.cmd, msg: fmt.Sprintf(format, args...)}
}

// parseArgs is parse followed by a check of the number of positional arguments, from
// min to max (-1: no limit), against the synopsis.
func (f *flags) parseArgs(args []string, min, max int, synopsis string) ([]string, error) {
	pos, err := f.parse(args)
	switch {
	case err != nil:
		return nil, err
	case len(pos) < min:
		return nil, f.fail("missing arguments: okiba %s %s", f.cmd, synopsis)
	case max >= 0 && len(pos) > max:
		return nil, f.fail("unexpected argument %q: okiba %s %s", pos[max], f.cmd, synopsis)
	}
	return pos, nil
}

func (f *flags) printHelp(w io.Writer) {
	fmt.Fprint(w, strings.TrimSpace(f.usage)+"\n")
	var fls []*flag.Flag
	f.VisitAll(func(fl *flag.Flag) { fls = append(fls, fl) }) // in lexicographical order
	if len(fls) > 0 {
		fmt.Fprint(w, "\nFlags:\n")
	}
	for _, fl := range fls {
		printFlag(w, fl)
	}
	if ex := strings.TrimSpace(f.examples); ex != "" {
		fmt.Fprint(w, "\nExamples:\n"+indent(ex, "  ")+"\n")
	}
}

// printFlag writes one flag of the help: its name and argument, then its usage.
func printFlag(w io.Writer, fl *flag.Flag) {
	arg, usage := flag.UnquoteUsage(fl)
	if _, ok := fl.Value.(secondsOrDuration); ok && arg == "value" {
		arg = "duration"
	}
	switch arg {
	case "duration":
		arg = "DURATION"
	case "int", "int64", "uint":
		arg = "N"
	case "string", "value":
		arg = "VALUE"
	}
	if _, ok := fl.Value.(interface{ IsBoolFlag() bool }); ok {
		arg = ""
	}
	head := "  --" + fl.Name
	if arg != "" {
		head += " " + arg
	}
	if showDefault(fl.DefValue) && !strings.Contains(usage, "(default") {
		usage += " (default " + fl.DefValue + ")"
	}
	fmt.Fprintf(w, "%s\n        %s\n", head, usage)
}

func showDefault(v string) bool {
	switch v {
	case "", "0", "false", "0s", "0B":
		return false
	}
	return true
}

func indent(s, prefix string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		if l = strings.TrimSpace(l); l != "" {
			lines[i] = prefix + l
		} else {
			lines[i] = ""
		}
	}
	return strings.Join(lines, "\n")
}

// ---------------------------------------------------------------------------------------
// Environment and the client

// env returns the value of an environment variable through the app's Getenv.
func (a *app) env(name string) string {
	if a.Getenv == nil {
		return ""
	}
	return a.Getenv(name)
}

// pick returns the flag value if given, else the environment variable, else def: flags
// win over the environment.
func (a *app) pick(flagValue, envName, def string) string {
	if flagValue != "" {
		return flagValue
	}
	if v := a.env(envName); v != "" {
		return v
	}
	return def
}

// clientFlags are the flags of every command that talks to a server.
type clientFlags struct {
	server string
	token  string
	// caCert, clientCert and clientKey are the TLS files (tlsflags.go).
	caCert, clientCert, clientKey string
}

const clientHelp = `

Every command that talks to a server takes --server (env OKIBA_SERVER, default
http://127.0.0.1:7070) and --token (env OKIBA_TOKEN) for a server that requires one.
For an https:// server, --ca-cert FILE (env OKIBA_CA_CERT) trusts that CA instead of the
system's, and --client-cert FILE --client-key FILE present a client certificate.`

func (c *clientFlags) register(f *flags) {
	f.StringVar(&c.server, "server", "", "okiba server `URL` (default "+client.DefaultServer+"; env OKIBA_SERVER)")
	f.StringVar(&c.token, "token", "", "bearer `TOKEN` for a server started with an auth token (env OKIBA_TOKEN)")
	c.registerTLS(f)
}

// serverFlags returns the flag set of a command that talks to a server: --server and
// --token are registered and clientHelp ends the usage. f.client then connects.
func (a *app) serverFlags(cmd, usage, examples string) *flags {
	f := a.flags(cmd, usage+clientHelp, examples)
	f.conn = &clientFlags{}
	f.conn.register(f)
	return f
}

// clientArgs is what most commands begin with: parseArgs, then client.
func (f *flags) clientArgs(args []string, min, max int, synopsis string) ([]string, *client.Client, error) {
	pos, err := f.parseArgs(args, min, max, synopsis)
	if err != nil {
		return nil, nil, err
	}
	cl, err := f.client()
	f.app.client = cl
	return pos, cl, err
}

// client returns a client for the server chosen by the flags and the environment.
func (f *flags) client() (*client.Client, error) {
	a := f.app
	server := a.pick(f.conn.server, "OKIBA_SERVER", client.DefaultServer)
	tc, err := f.conn.tlsConfig(f)
	if err != nil {
		return nil, err
	}
	// A command makes a request or a few: opening a stream would only add a round trip.
	cl, err := client.New(server, client.Options{Token: a.pick(f.conn.token, "OKIBA_TOKEN", ""), NoStream: true, TLS: tc})
	if err != nil {
		return nil, f.fail("--server %q must look like http://host:port", server)
	}
	return cl, nil
}

// ---------------------------------------------------------------------------------------
// Flag types

// kvFlag collects repeated KEY=VALUE flags (--header, --tag).
type kvFlag struct{ m map[string]string }

func (k *kvFlag) String() string {
	if k == nil || len(k.m) == 0 {
		return ""
	}
	keys := slices.Sorted(maps.Keys(k.m))
	for i, key := range keys {
		keys[i] = key + "=" + k.m[key]
	}
	return strings.Join(keys, ",")
}

func (k *kvFlag) Set(v string) error {
	key, val, ok := strings.Cut(v, "=")
	if !ok || key == "" {
		return fmt.Errorf("%q is not KEY=VALUE", v)
	}
	if k.m == nil {
		k.m = map[string]string{}
	}
	k.m[key] = val
	return nil
}

// byteSize is a size in bytes written as a number with an optional binary suffix:
// 1048576, 1024KiB, 64MiB, 2GiB.
type byteSize int64

var sizeUnits = []struct {
	suffix string
	n      int64
}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"B", 1}}

func (s *byteSize) String() string {
	v := int64(*s)
	for _, u := range sizeUnits {
		if v != 0 && v%u.n == 0 {
			return strconv.FormatInt(v/u.n, 10) + u.suffix
		}
	}
	return strconv.FormatInt(v, 10) + "B"
}

// sizeString writes n as a byteSize flag would be given: "256MiB".
func sizeString(n int64) string {
	s := byteSize(n)
	return s.String()
}

func (s *byteSize) Set(v string) error {
	if strings.TrimSpace(v) == "off" { // for limits that can be turned off
		*s = -1
		return nil
	}
	num, mult := strings.TrimSpace(v), int64(1)
	for _, u := range sizeUnits {
		if rest, ok := strings.CutSuffix(num, u.suffix); ok {
			num, mult = strings.TrimSpace(rest), u.n
			break
		}
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n < 0 || n > (1<<62)/mult {
		return fmt.Errorf("%q is not a size (examples: 1048576, 512KiB, 64MiB, 1GiB)", v)
	}
	*s = byteSize(n * mult)
	return nil
}

// ---------------------------------------------------------------------------------------
// Output

// printJSON writes v as one line of JSON.
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// printJSONIndent writes v as indented JSON.
func printJSONIndent(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// human writes a duration without the trailing zero units of time.Duration.String:
// 5m instead of 5m0s, 336h instead of 336h0m0s.
func human(d time.Duration) string {
	s := d.String()
	if t, ok := strings.CutSuffix(s, "m0s"); ok {
		s = t + "m"
	}
	if t, ok := strings.CutSuffix(s, "h0m"); ok {
		s = t + "h"
	}
	return s
}

// age rounds a duration for display: milliseconds below a second, tenths below a
// minute, seconds above.
func age(d time.Duration) string {
	switch {
	case d <= 0:
		return "0s"
	case d < time.Second:
		return human(d.Round(time.Millisecond))
	case d < time.Minute:
		return human(d.Round(100 * time.Millisecond))
	}
	return human(d.Round(time.Second))
}

// msDur turns a float of milliseconds (as the stats carry them) into a display string.
func msDur(ms float64) string {
	if ms <= 0 {
		return "-"
	}
	return age(time.Duration(ms * float64(time.Millisecond)))
}

func rate(r float64) string {
	if r == 0 {
		return "0"
	}
	return strconv.FormatFloat(r, 'f', 2, 64)
}

// printable makes text safe for a terminal: control characters other than newline and
// tab are escaped, so a message body cannot move the cursor or change colours.
func printable(s string) string {
	if !strings.ContainsFunc(s, func(r rune) bool { return unicode.IsControl(r) && r != '\n' && r != '\t' }) {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		if unicode.IsControl(r) && r != '\n' && r != '\t' {
			q := strconv.QuoteRune(r)
			b.WriteString(q[1 : len(q)-1])
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// preview is a one-line, quoted, shortened view of a body for tables.
func preview(body []byte, n int) string {
	if !utf8.Valid(body) {
		return fmt.Sprintf("(%d bytes, binary)", len(body))
	}
	s := string(body)
	if utf8.RuneCountInString(s) > n {
		s = string([]rune(s)[:n]) + "…"
	}
	return strconv.Quote(s)
}

// short abbreviates an opaque token (a receipt) for per-item output.
func short(s string) string {
	if len(s) <= 24 {
		return s
	}
	return s[:20] + "…"
}

// readIDs is the ids of a command's arguments, where "-" stands for those read from
// stdin, one per line (okiba fetch, okiba dlq delete).
func readIDs(args []string, stdin io.Reader) ([]string, error) {
	var ids []string
	for _, v := range args {
		if v != "-" {
			ids = append(ids, v)
			continue
		}
		lines, err := readLines(stdin)
		if err != nil {
			return nil, fmt.Errorf("read ids from stdin: %w", err)
		}
		ids = append(ids, lines...)
	}
	return ids, nil
}

// readLines reads non-empty, trimmed lines (receipts piped from another command).
func readLines(r io.Reader) ([]string, error) {
	var out []string
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); l != "" {
			out = append(out, l)
		}
	}
	return out, sc.Err()
}

// isTerminal reports whether f is a character device such as a terminal.
func isTerminal(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// interrupted reports whether err is the cancellation caused by Ctrl-C or SIGTERM.
func interrupted(ctx context.Context, err error) bool {
	return ctx.Err() != nil && errors.Is(err, context.Canceled)
}

// printList is what the list commands print: the API's JSON (wire) with --json; else
// none on stderr when there is nothing; else a table of header and one row per item,
// aligned as align says (tabwriter's flags).
func printList[T any](a *app, asJSON bool, wire any, items []T, none string, align uint, header string, row func(T) string) error {
	if asJSON {
		return printJSONIndent(a.Stdout, wire)
	}
	if len(items) == 0 {
		fmt.Fprintln(a.Stderr, none)
		return nil
	}
	w := tabwriter.NewWriter(a.Stdout, 0, 0, 2, ' ', align)
	fmt.Fprintln(w, header)
	for _, it := range items {
		fmt.Fprintln(w, row(it))
	}
	return w.Flush()
}

// secondsOrDuration is a duration flag that also takes bare seconds ("30", "1.5"), as the
// HTTP API's durations do, besides Go's forms ("30s", "1m30s").
type secondsOrDuration struct{ p *time.Duration }

func (d secondsOrDuration) String() string {
	if d.p == nil {
		return "0s"
	}
	return d.p.String()
}

func (d secondsOrDuration) Set(s string) error {
	if v, err := strconv.ParseFloat(s, 64); err == nil {
		if v != v || v > float64(1<<62)/float64(time.Second) || v < -float64(1<<62)/float64(time.Second) {
			return fmt.Errorf("%q is out of range", s)
		}
		*d.p = time.Duration(v * float64(time.Second))
		return nil
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("%q is not a duration: give seconds (30) or a duration (30s, 1m30s, 500ms)", s)
	}
	*d.p = v
	return nil
}

// DurationVar defines a duration flag that accepts bare seconds too (secondsOrDuration).
func (f *flags) DurationVar(p *time.Duration, name string, value time.Duration, usage string) {
	*p = value
	f.Var(secondsOrDuration{p}, name, usage)
}

// Duration is DurationVar returning the variable.
func (f *flags) Duration(name string, value time.Duration, usage string) *time.Duration {
	p := new(time.Duration)
	f.DurationVar(p, name, value, usage)
	return p
}
