package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"strings"

	"github.com/okiba/okiba/api"
	"github.com/okiba/okiba/broker"
	"github.com/okiba/okiba/client"
	"github.com/okiba/okiba/internal/buildinfo"
)

// app is the command line with its streams and environment. They are fields so that
// tests run commands in-process.
type app struct {
	Stdout io.Writer
	Stderr io.Writer
	Stdin  io.Reader
	Getenv func(string) string
	// StdinTTY and StderrTTY say whether Stdin and Stderr are terminals: purge asks for
	// confirmation only on a terminal, and redrive progress is redrawn in place only there.
	StdinTTY  bool
	StderrTTY bool
	// client is the last client a command made, which an error message may ask (the
	// queues, to suggest the name meant).
	client *client.Client
	// collect, when set, is handed each command's flag set in place of parsing it (the
	// command then returns errHelp): okiba completion reads the commands' flags so.
	collect func(*flags)
}

func newOSApp() *app {
	return &app{
		Stdout: os.Stdout, Stderr: os.Stderr, Stdin: os.Stdin, Getenv: os.Getenv,
		StdinTTY: isTerminal(os.Stdin), StderrTTY: isTerminal(os.Stderr),
	}
}

// command is one okiba command (or group of subcommands).
type command interface {
	Run(ctx context.Context, args []string) error
}

// entry names a command in a table of commands.
type entry struct {
	name    string
	summary string
	new     func(a *app, name string) command
}

func (a *app) commands() []entry {
	return []entry{
		{"serve", "run a broker on a data directory", func(a *app, _ string) command { return &serveCmd{app: a} }},
		{"salvage", "cut a damaged last batch off the log of a stopped broker", func(a *app, _ string) command { return &salvageCmd{app: a} }},
		{"verify", "check every checksum of a stopped broker's data directory", func(a *app, _ string) command { return &verifyCmd{app: a} }},
		{"backup", "write a consistent backup of a running broker to a file", func(a *app, _ string) command { return &backupCmd{app: a} }},
		{"restore", "make a new data directory from a backup", func(a *app, _ string) command { return &restoreCmd{app: a} }},
		{"queue", "create, update, inspect, list, purge and delete queues", func(a *app, _ string) command { return queueGroup(a) }},
		{"send", "send a message", func(a *app, _ string) command { return &sendCmd{app: a} }},
		{"recv", "receive (lease) messages", func(a *app, _ string) command { return &recvCmd{app: a} }},
		{"peek", "list a queue's messages without leasing them", func(a *app, _ string) command { return &peekCmd{app: a} }},
		{"explain", "say why a message is or is not being delivered now", func(a *app, _ string) command { return &explainCmd{app: a} }},
		{"consume", "run a command for each message: ack on exit 0, nack otherwise", func(a *app, _ string) command { return &consumeCmd{app: a} }},
		{"ack", "settle received messages", newSettle},
		{"nack", "release received messages for redelivery", newSettle},
		{"extend", "lengthen the leases of received messages", newSettle},
		{"deadletter", "move received messages to the dead-letter queue", newSettle},
		{"defer", "set received messages aside, to fetch them later by id", newSettle},
		{"fetch", "fetch deferred messages by id, leasing them again", func(a *app, _ string) command { return &fetchCmd{app: a} }},
		{"dlq", "list dead letters and redrive them", func(a *app, _ string) command { return dlqGroup(a) }},
		{"parked", "list a queue's parked groups and the dead letter each waits for", func(a *app, _ string) command { return &parkedCmd{app: a} }},
		{"release", "release a parked group by hand", func(a *app, _ string) command { return &releaseCmd{app: a} }},
		{"stats", "queue statistics, rates and Little's law", func(a *app, _ string) command { return &statsCmd{app: a} }},
		{"consumers", "a queue's receivers seen lately: long polls waiting, leases held", func(a *app, _ string) command { return &consumersCmd{app: a} }},
		{"topic", "create and manage topics (partitioned logs), publish and read records", func(a *app, _ string) command { return topicGroup(a) }},
		{"subscription", "feed a topic's records into a queue, filtered", func(a *app, _ string) command { return subscriptionGroup(a) }},
		{"group", "create, inspect, list, delete and seek a topic's consumer groups", func(a *app, _ string) command { return consumerGroupCommands(a) }},
		{"principal", "create and manage principals: who may call the server, and what each may do", func(a *app, _ string) command { return principalGroup(a) }},
		{"token", "print a fresh secret for --auth-token or a declared principal", func(a *app, _ string) command { return &tokenCmd{app: a} }},
		{"demo", "run the CampusCafe walkthrough (outbox, inboxes, chaos)", func(a *app, _ string) command { return demoGroup(a) }},
		{"torture", "kill -9 this binary under load and check no acknowledged message is lost", func(a *app, _ string) command { return &tortureCmd{app: a} }},
		{"cluster", "a replicated cluster's members, leader and progress", func(a *app, _ string) command { return clusterGroup(a) }},
		{"health", "exit 0 when the server serves (for health checks)", func(a *app, _ string) command { return &healthCmd{app: a} }},
		{"completion", "print a shell completion script (bash, zsh, fish)", func(a *app, _ string) command { return &completionCmd{app: a} }},
		{"version", "print the version", func(a *app, _ string) command { return &versionCmd{app: a} }},
		{"help", "show help for a command", func(a *app, _ string) command { return &helpCmd{app: a} }},
	}
}

const overview = `okiba is a durable message broker: one process, one data directory, an HTTP API.

Usage: okiba COMMAND [ARGUMENTS] [FLAGS]

Commands:
%s
Run 'okiba help COMMAND' or 'okiba COMMAND -h' for a command's flags and examples.
Flags may come before or after arguments; "--" ends the flags.
Exit status: 0 on success, 1 on errors (the server's error code and message are printed
on stderr), 2 on usage errors, 130 when interrupted.

Start a broker and try it:
  okiba serve --data ./okiba-data &
  okiba queue create orders
  okiba send orders 'hello'
  okiba recv orders --ack

Or a topic, a partitioned log read by offset:
  okiba topic create events --partitions 3
  okiba topic publish events 'hello' --key user-1
  okiba topic read events --follow
`

func (a *app) printOverview(w io.Writer) {
	var b strings.Builder
	for _, e := range a.commands() {
		fmt.Fprintf(&b, "  %-11s %s\n", e.name, e.summary)
	}
	fmt.Fprintf(w, overview, b.String())
}

// run runs the command line args (without the program name) and returns the exit status.
func (a *app) run(ctx context.Context, args []string) int {
	if len(args) == 0 {
		a.printOverview(a.Stderr)
		return 2
	}
	name := args[0]
	switch name {
	case "-h", "-help", "--help":
		a.printOverview(a.Stdout)
		return 0
	case "-v", "-version", "--version":
		name = "version"
	}
	for _, e := range a.commands() {
		if e.name == name {
			return a.exit(ctx, name, e.new(a, name).Run(ctx, args[1:]))
		}
	}
	return a.exit(ctx, "", &usageError{msg: unknownCommand("command", name, a.commands(), "okiba help")})
}

// unknownCommand is the message for a command or subcommand name that is not in es, with
// the closest one when one is close, and where the list is (help; "" when the usage
// line that follows says it).
func unknownCommand(kind, name string, es []entry, help string) string {
	names := make([]string, len(es))
	for i, e := range es {
		names[i] = e.name
	}
	msg := fmt.Sprintf("unknown %s %q", kind, name)
	if s := didYouMean(name, names); s != "" {
		msg += fmt.Sprintf(" (did you mean %q?)", s)
	}
	if help != "" {
		msg += fmt.Sprintf("; run '%s' for the list", help)
	}
	return msg
}

// exit reports err on stderr and returns the exit status for it.
func (a *app) exit(ctx context.Context, cmd string, err error) int {
	var (
		ue *usageError
		ee *exitError
		ae *api.Error
		oe *net.OpError
		ce *cmdError
	)
	if errors.As(err, &ce) {
		cmd = ce.cmd
	}
	prefix := "okiba: "
	if cmd != "" {
		prefix = "okiba " + cmd + ": "
	}
	switch {
	case err == nil, errors.Is(err, errHelp):
		return 0
	case errors.As(err, &ue):
		if ue.cmd == "" {
			fmt.Fprintf(a.Stderr, "okiba: %s\n", ue.msg)
		} else {
			fmt.Fprintf(a.Stderr, "okiba %s: %s\nRun 'okiba %s -h' for usage.\n", ue.cmd, ue.msg, ue.cmd)
		}
		return 2
	case errors.As(err, &ee):
		return ee.code
	case interrupted(ctx, err):
		fmt.Fprintln(a.Stderr, prefix+"interrupted")
		return 130
	case errors.As(err, &ae):
		msg := err.Error() // the code and message, with any hint wrapped around them
		if ae.Code == api.CodeUnauthorized {
			msg += " (give the server's token with --token or OKIBA_TOKEN)"
		}
		if ae.Code == api.CodeQueueNotFound {
			msg += a.queueMeant(ctx, ae.Message)
		}
		fmt.Fprintln(a.Stderr, prefix+msg)
	case errors.As(err, &oe) && oe.Op == "dial":
		fmt.Fprintf(a.Stderr, "%scannot reach the okiba server: %v\n(is 'okiba serve' running there? point --server or OKIBA_SERVER at it)\n", prefix, oe)
	default:
		fmt.Fprintln(a.Stderr, prefix+err.Error())
	}
	return 1
}

// ---------------------------------------------------------------------------------------
// Groups of subcommands (queue, dlq)

type group struct {
	app   *app
	name  string
	usage string
	subs  []entry
}

func (g *group) printUsage(w io.Writer) {
	var b strings.Builder
	for _, e := range g.subs {
		fmt.Fprintf(&b, "  %-9s %s\n", e.name, e.summary)
	}
	fmt.Fprintf(w, "%s\n\nSubcommands:\n%s\nRun 'okiba %s SUBCOMMAND -h' for its flags and examples.\n",
		strings.TrimSpace(g.usage), b.String(), g.name)
}

func (g *group) Run(ctx context.Context, args []string) error {
	if len(args) == 0 {
		g.printUsage(g.app.Stderr)
		return &exitError{code: 2}
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		if len(args) > 1 && args[0] == "help" {
			return g.Run(ctx, []string{args[1], "-h"})
		}
		g.printUsage(g.app.Stdout)
		return nil
	}
	for _, e := range g.subs {
		if e.name == args[0] {
			name := g.name + " " + e.name
			if err := e.new(g.app, name).Run(ctx, args[1:]); err != nil {
				return &cmdError{cmd: name, err: err}
			}
			return nil
		}
	}
	return &usageError{cmd: g.name, msg: unknownCommand("subcommand", args[0], g.subs, "")}
}

// cmdError names the subcommand that failed, for the "okiba queue create: …" prefix.
type cmdError struct {
	cmd string
	err error
}

func (e *cmdError) Error() string { return e.err.Error() }
func (e *cmdError) Unwrap() error { return e.err }

// ---------------------------------------------------------------------------------------
// help and version

type helpCmd struct{ app *app }

func (c *helpCmd) Run(ctx context.Context, args []string) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "-help" {
		c.app.printOverview(c.app.Stdout)
		return nil
	}
	for _, e := range c.app.commands() {
		if e.name == args[0] {
			// Every command prints its help on -h; a group passes a subcommand on.
			return e.new(c.app, e.name).Run(ctx, append(args[1:len(args):len(args)], "-h"))
		}
	}
	return &usageError{cmd: "help", msg: unknownCommand("command", args[0], c.app.commands(), "okiba help")}
}

type versionCmd struct{ app *app }

func (c *versionCmd) Run(ctx context.Context, args []string) error {
	f := c.app.flags("version", `
Usage: okiba version [--json]

Prints okiba's release version, the commit it was built from and that commit's date (a
release's binary is the same whoever builds the commit, and whenever), the data format
and the Go version. A running server answers the same in /healthz ("build") and as the
metric okiba_build_info. Also okiba --version.`, "okiba version\nokiba version --json")
	asJSON := f.Bool("json", false, "print the build as JSON, with the commit's full hash")
	if _, err := f.parseArgs(args, 0, 0, "[--json]"); err != nil {
		return err
	}
	b := buildinfo.Get()
	if *asJSON {
		return printJSON(c.app.Stdout, struct {
			api.Build
			DataFormat int    `json:"data_format"`
			Platform   string `json:"platform"`
		}{b, broker.FormatVersion, runtime.GOOS + "/" + runtime.GOARCH})
	}
	var commit string
	if b.Commit != "" {
		commit = "commit " + buildinfo.Short(b.Commit)
		if b.Modified {
			commit += "+modified"
		}
		if b.CommitTime != "" {
			commit += " of " + b.CommitTime
		}
		commit += "; "
	}
	fmt.Fprintf(c.app.Stdout, "okiba %s (%sdata format %d, %s %s/%s)\n", b.Version, commit, broker.FormatVersion, b.GoVersion, runtime.GOOS, runtime.GOARCH)
	return nil
}
