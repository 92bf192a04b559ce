package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
)

// okiba completion bash|zsh|fish prints a completion script made from the commands'
// own table (app.commands and each group's subcommands) and their own flag sets, so
// that the script completes exactly the commands and flags that did-you-mean knows, and
// a new flag needs no second list. Queue names are completed from the server when one
// answers (okiba queue list), for the commands whose first argument is a queue.

// spec is one command path ("queue create") with what may follow it.
type spec struct {
	path    string   // "" for okiba itself
	summary string   // of the command
	subs    []string // subcommands, for a group
	flags   []string // flag names without dashes
	values  []string // those that take a value (not booleans)
	queue   bool     // the first positional argument is a queue's name
	words   []string // the words its first positional argument may be
}

// queueFirst are the commands whose first argument is a queue: the script completes
// it from the server.
var queueFirst = map[string]bool{
	"send": true, "recv": true, "peek": true, "consume": true, "ack": true, "nack": true, "extend": true,
	"deadletter": true, "stats": true, "consumers": true, "queue get": true, "queue update": true,
	"queue delete": true, "queue purge": true, "dlq list": true, "dlq redrive": true, "dlq delete": true,
}

// specs walks the command table: each command (and group's subcommand) is run with -h
// while the app collects its flag set instead of printing its help.
func (a *app) specs(ctx context.Context) []spec {
	var flagsOf *flags
	probe := &app{Stdout: io.Discard, Stderr: io.Discard, Stdin: strings.NewReader(""), Getenv: func(string) string { return "" },
		collect: func(f *flags) { flagsOf = f }}
	describe := func(path, summary string, cmd command) spec {
		s := spec{path: path, summary: summary, queue: queueFirst[path]}
		if g, ok := cmd.(*group); ok {
			for _, e := range g.subs {
				s.subs = append(s.subs, e.name)
			}
			s.flags = []string{"help"}
			return s
		}
		flagsOf = nil
		if err := cmd.Run(ctx, []string{"-h"}); err != nil && !errors.Is(err, errHelp) {
			return s // a command without flags of its own (help)
		}
		s.flags = []string{"help"}
		if flagsOf != nil {
			flagsOf.VisitAll(func(fl *flag.Flag) {
				s.flags = append(s.flags, fl.Name)
				if b, ok := fl.Value.(interface{ IsBoolFlag() bool }); !ok || !b.IsBoolFlag() {
					s.values = append(s.values, fl.Name)
				}
			})
		}
		slices.Sort(s.flags)
		return s
	}
	top := spec{flags: []string{"help", "version"}}
	var out []spec
	for _, e := range probe.commands() {
		top.subs = append(top.subs, e.name)
		cmd := e.new(probe, e.name)
		s := describe(e.name, e.summary, cmd)
		out = append(out, s)
		if g, ok := cmd.(*group); ok {
			for _, sub := range g.subs {
				name := e.name + " " + sub.name
				out = append(out, describe(name, sub.summary, sub.new(probe, name)))
			}
		}
	}
	for i := range out {
		switch out[i].path {
		case "completion":
			out[i].words = shells
		case "help":
			out[i].words = top.subs
		}
	}
	return append([]spec{top}, out...)
}

var shells = []string{"bash", "zsh", "fish"}

type completionCmd struct{ app *app }

func (c *completionCmd) Run(ctx context.Context, args []string) error {
	f := c.app.flags("completion", `
Usage: okiba completion bash|zsh|fish

Prints a script that completes okiba's commands, subcommands and flags in your shell,
and queue names from the server (OKIBA_SERVER, OKIBA_TOKEN) when one answers. Load it
in the shell's start-up file.`, `
source <(okiba completion bash)                          # in ~/.bashrc
okiba completion zsh > "${fpath[1]}/_okiba"              # or: source <(okiba completion zsh)
okiba completion fish > ~/.config/fish/completions/okiba.fish`)
	pos, err := f.parseArgs(args, 1, 1, "bash|zsh|fish")
	if err != nil {
		return err
	}
	specs := c.app.specs(ctx)
	switch pos[0] {
	case "bash":
		writeBash(c.app.Stdout, specs)
	case "zsh":
		fmt.Fprint(c.app.Stdout, "#compdef okiba\n# okiba's completion for zsh: the bash script, through zsh's bashcompinit.\n"+
			"autoload -U +X bashcompinit && bashcompinit\n")
		writeBash(c.app.Stdout, specs)
	case "fish":
		writeFish(c.app.Stdout, specs)
	default:
		msg := fmt.Sprintf("unknown shell %q: okiba completion bash|zsh|fish", pos[0])
		if s := didYouMean(pos[0], shells); s != "" {
			msg = fmt.Sprintf("unknown shell %q (did you mean %q?): okiba completion bash|zsh|fish", pos[0], s)
		}
		return f.fail("%s", msg)
	}
	return nil
}

func dashed(names []string) string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = "--" + n
	}
	return strings.Join(out, " ")
}

// writeBash writes the bash script: _okiba walks the words before the cursor to the
// command path (skipping flags and the values of the flags that take one), then offers
// that path's subcommands, flags or queue names.
func writeBash(w io.Writer, specs []spec) {
	fmt.Fprint(w, "# okiba's completion for bash, made by 'okiba completion bash' from its own command table.\n")
	fmt.Fprint(w, "_okiba_spec() {\n  # $1: the command path; sets subs, flags, values, queue and words.\n  subs= flags= values= queue= words=\n  case \"$1\" in\n")
	for _, s := range specs {
		fmt.Fprintf(w, "    %q) subs=%q flags=%q values=%q", s.path, strings.Join(s.subs, " "), dashed(s.flags), dashed(s.values))
		if len(s.words) > 0 {
			fmt.Fprintf(w, " words=%q", strings.Join(s.words, " "))
		}
		if s.queue {
			fmt.Fprint(w, " queue=1")
		}
		fmt.Fprint(w, " ;;\n")
	}
	fmt.Fprint(w, `  esac
}

_okiba_queues() {
  # The server's queue names, when one answers within a second.
  local cmd=${COMP_WORDS[0]}
  timeout 1 "$cmd" queue list 2>/dev/null | awk 'NR > 1 { print $1 }'
}

_okiba() {
  local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]}
  local path="" args=0 i word subs flags values queue words
  for ((i = 1; i < COMP_CWORD; i++)); do
    word=${COMP_WORDS[i]}
    if [[ $word == -- ]]; then
      args=99
      continue
    fi
    if [[ $word == -* ]]; then
      _okiba_spec "$path"
      if [[ $word != *=* && " $values " == *" $word "* ]]; then
        ((i++))
      fi
      continue
    fi
    _okiba_spec "$path"
    if ((args == 0)) && [[ " $subs " == *" $word "* ]]; then
      path="${path:+$path }$word"
    else
      ((args++))
    fi
  done
  _okiba_spec "$path"
  if [[ $prev == -* && $prev != *=* && " $values " == *" $prev "* ]]; then
    COMPREPLY=()
    return
  fi
  if [[ $cur == -* ]]; then
    COMPREPLY=($(compgen -W "$flags" -- "$cur"))
  elif [[ -n $subs ]] && ((args == 0)); then
    COMPREPLY=($(compgen -W "$subs" -- "$cur"))
  elif [[ -n $words ]] && ((args == 0)); then
    COMPREPLY=($(compgen -W "$words" -- "$cur"))
  elif [[ -n $queue ]] && ((args == 0)); then
    COMPREPLY=($(compgen -W "$(_okiba_queues)" -- "$cur"))
  else
    COMPREPLY=()
  fi
}
complete -o default -F _okiba okiba
`)
}

// writeFish writes the fish script: __okiba_path finds the command path the same way,
// and each subcommand and flag is offered at its path.
func writeFish(w io.Writer, specs []spec) {
	fmt.Fprint(w, "# okiba's completion for fish, made by 'okiba completion fish' from its own command table.\n")
	fmt.Fprint(w, "function __okiba_subs\n    switch $argv[1]\n")
	for _, s := range specs {
		if len(s.subs) > 0 {
			fmt.Fprintf(w, "        case %s\n            echo %s\n", fishQuote(s.path), strings.Join(s.subs, " "))
		}
	}
	fmt.Fprint(w, `    end
end

function __okiba_path
    set -l words (commandline -opc)
    set -l path ''
    for word in $words[2..-1]
        if string match -q -- '-*' $word
            continue
        end
        if contains -- $word (string split ' ' -- (__okiba_subs "$path"))
            set path (string trim -- "$path $word")
        else
            break
        end
    end
    echo $path
end

function __okiba_at
    set -l path (__okiba_path)
    test "$path" = "$argv[1]"
end

complete -c okiba -f
`)
	summaries := map[string]string{}
	for _, s := range specs {
		summaries[s.path] = s.summary
	}
	for _, s := range specs {
		at := fmt.Sprintf("-n '__okiba_at %s'", fishQuote(s.path))
		for _, sub := range s.subs {
			name := strings.TrimSpace(s.path + " " + sub)
			fmt.Fprintf(w, "complete -c okiba %s -a %s -d %s\n", at, fishQuote(sub), fishQuote(summaries[name]))
		}
		for _, fl := range s.flags {
			req := ""
			if slices.Contains(s.values, fl) {
				req = " -r"
			}
			fmt.Fprintf(w, "complete -c okiba %s -l %s%s\n", at, fl, req)
		}
		if len(s.words) > 0 {
			fmt.Fprintf(w, "complete -c okiba %s -a %s\n", at, fishQuote(strings.Join(s.words, " ")))
		}
		if s.queue {
			fmt.Fprintf(w, "complete -c okiba %s -a '(okiba queue list 2>/dev/null | tail -n +2 | string replace -r \"\\\\s.*\" \"\")'\n", at)
		}
	}
}

// fishQuote quotes s for fish, in single quotes.
func fishQuote(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s) + "'"
}
