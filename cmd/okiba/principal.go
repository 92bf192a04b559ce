package main

import (
	"cmp"
	"context"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/okiba/okiba/api"
	"github.com/okiba/okiba/internal/auth"
)

// The principal group: who may call the server and what each may do (docs/api.md
// "Principals"), and `okiba token`, which makes a secret for the configuration.

func principalGroup(a *app) command {
	return &group{app: a, name: "principal", usage: `
Usage: okiba principal SUBCOMMAND [NAME] [flags]

Manages principals: the callers a server knows, each with a name, a secret and grants.
A principal's secret is its bearer token (--token), its SQS secret access key (its name
is the access key id) and its console password. A grant is a permission on a pattern
of names: send, receive, browse or manage on queue:GLOB or topic:GLOB (such as
queue:orders-*), or admin or metrics on the whole server. What no grant allows is
refused. These commands need an admin's token; principals declared in the server's
configuration are listed but changed only there.` + clientHelp,
		subs: []entry{
			{"create", "make a principal and print its secret (once)", func(a *app, n string) command { return &principalCreateCmd{app: a, name: n} }},
			{"list", "list principals with their grants", func(a *app, n string) command { return &principalListCmd{app: a, name: n} }},
			{"show", "show a principal's grants and secrets (not the secrets themselves)", func(a *app, n string) command { return &principalShowCmd{app: a, name: n} }},
			{"grant", "add a grant to a principal", func(a *app, n string) command { return &principalGrantCmd{app: a, name: n, op: "grant"} }},
			{"revoke", "remove a grant from a principal", func(a *app, n string) command { return &principalGrantCmd{app: a, name: n, op: "revoke"} }},
			{"rotate", "give a principal a new secret, keeping the old one for a while", func(a *app, n string) command { return &principalRotateCmd{app: a, name: n} }},
			{"delete", "delete a principal: its secrets stop working at once", func(a *app, n string) command { return &principalDeleteCmd{app: a, name: n} }},
		}}
}

// listFlag collects a repeated flag's values (--grant).
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ", ") }

func (l *listFlag) Set(v string) error {
	*l = append(*l, v)
	return nil
}

// printSecret shows a secret made just now: alone on stdout, so that a script can take
// it, and on stderr what it is and that it will not be shown again.
func printSecret(a *app, what string, s *api.IssuedSecret) {
	fmt.Fprintln(a.Stderr, what)
	fmt.Fprintln(a.Stdout, s.Secret)
	fmt.Fprintln(a.Stderr, "This secret will not be shown again: store it now (it is the principal's --token, SQS secret access key and console password).")
}

func grantsText(gs []string) string { return cmp.Or(strings.Join(gs, ", "), "(none)") }

// ---------------------------------------------------------------------------------------

type principalCreateCmd struct {
	app  *app
	name string
}

func (c *principalCreateCmd) Run(ctx context.Context, args []string) error {
	f := c.app.serverFlags(c.name, `
Usage: okiba principal create NAME [--grant "PERMISSION PATTERN"]... [--json]

Makes principal NAME with the grants given (none: it may do nothing until granted) and
prints its secret on stdout, once: the server keeps it only sealed and cannot show it
again (rotate makes a new one). NAME is 1 to 64 letters, digits, '-', '_', '.' and '@',
starting with a letter or digit; it is also the principal's SQS access key id.

Permissions: send, receive (and settle what was received), browse (peek, statistics,
list), manage (create, update, purge, delete, redrive; includes browse) on queue:GLOB or
topic:GLOB; admin (everything) and metrics (/metrics only) on the whole server.`, `
okiba principal create shop --grant "send queue:orders-*"
okiba principal create worker --grant "receive queue:orders-*" --grant "browse queue:*"
okiba principal create prometheus --grant metrics
TOKEN=$(okiba principal create ci --grant admin 2>/dev/null)`)
	var grants listFlag
	f.Var(&grants, "grant", "a `GRANT` such as \"send queue:orders-*\", repeatable")
	asJSON := f.Bool("json", false, "print the principal and its secret as the API's JSON")
	pos, cl, err := f.clientArgs(args, 1, 1, `NAME [--grant "PERMISSION PATTERN"]...`)
	if err != nil {
		return err
	}
	s, err := cl.CreatePrincipal(ctx, pos[0], grants...)
	if err != nil {
		return err
	}
	if *asJSON {
		if err := printJSONIndent(c.app.Stdout, s); err != nil {
			return err
		}
		fmt.Fprintln(c.app.Stderr, "The secret will not be shown again: store it now.")
		return nil
	}
	printSecret(c.app, fmt.Sprintf("created principal %s with grants %s; its secret:", s.Principal.Name, grantsText(s.Principal.Grants)), s)
	return nil
}

// ---------------------------------------------------------------------------------------

type principalListCmd struct {
	app  *app
	name string
}

func (c *principalListCmd) Run(ctx context.Context, args []string) error {
	f := c.app.serverFlags(c.name, `
Usage: okiba principal list [--json]

Lists principals: those made with okiba principal create, then those declared in the
server's configuration (SOURCE config: the --auth-token's admin, the configuration
file's principals, the SQS credentials), with their grants and how many secrets are
valid (two during a rotation). No secret is shown.`, `
okiba principal list
okiba principal list --json | jq -r '.principals[].name'`)
	asJSON := f.Bool("json", false, "print the API's JSON")
	if _, err := f.parseArgs(args, 0, 0, "[--json]"); err != nil {
		return err
	}
	cl, err := f.client()
	if err != nil {
		return err
	}
	ps, err := cl.Principals(ctx)
	if err != nil {
		return err
	}
	return printList(c.app, *asJSON, api.PrincipalList{Principals: ps}, ps, "no principals", 0,
		"NAME\tSOURCE\tSECRETS\tGRANTS", func(p api.Principal) string {
			source, secrets := "api", fmt.Sprint(len(p.Secrets))
			if p.Declared {
				source, secrets = "config", "-"
			}
			return fmt.Sprintf("%s\t%s\t%s\t%s", p.Name, source, secrets, grantsText(p.Grants))
		})
}

// ---------------------------------------------------------------------------------------

type principalShowCmd struct {
	app  *app
	name string
}

func (c *principalShowCmd) Run(ctx context.Context, args []string) error {
	f := c.app.serverFlags(c.name, `
Usage: okiba principal show NAME [--json]

Shows a principal's grants and its secrets' ids, creation and expiry (a rotation's old
secret expires), never the secrets themselves.`, `
okiba principal show shop`)
	asJSON := f.Bool("json", false, "print the API's JSON")
	pos, cl, err := f.clientArgs(args, 1, 1, "NAME [--json]")
	if err != nil {
		return err
	}
	p, err := cl.Principal(ctx, pos[0])
	if err != nil {
		return err
	}
	if *asJSON {
		return printJSONIndent(c.app.Stdout, p)
	}
	return printPrincipal(c.app, p)
}

func printPrincipal(a *app, p *api.Principal) error {
	w := tabwriter.NewWriter(a.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintf(w, "Principal\t%s\n", p.Name)
	if p.Declared {
		fmt.Fprintf(w, "Source\tthe server's configuration (change it there)\n")
	} else {
		fmt.Fprintf(w, "Source\tokiba principal create\n")
		fmt.Fprintf(w, "Created\t%s\n", p.CreatedAt.Format(time.RFC3339))
		fmt.Fprintf(w, "Updated\t%s\n", p.UpdatedAt.Format(time.RFC3339))
	}
	fmt.Fprintf(w, "Grants\t%s\n", grantsText(p.Grants))
	if err := w.Flush(); err != nil {
		return err
	}
	if p.Declared {
		return nil
	}
	fmt.Fprintf(a.Stdout, "\nSecrets\n")
	w = tabwriter.NewWriter(a.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "ID\tCREATED\tEXPIRES")
	for _, s := range p.Secrets {
		expires := "never"
		if s.ExpiresAt != nil {
			expires = s.ExpiresAt.Format(time.RFC3339)
		}
		fmt.Fprintf(w, "%s\t%s\t%s\n", s.ID, s.CreatedAt.Format(time.RFC3339), expires)
	}
	return w.Flush()
}

// ---------------------------------------------------------------------------------------

// principalGrantCmd is principal grant and principal revoke.
type principalGrantCmd struct {
	app  *app
	name string
	op   string // grant or revoke
}

func (c *principalGrantCmd) Run(ctx context.Context, args []string) error {
	usage, examples := `
Usage: okiba principal grant NAME PERMISSION [PATTERN] [--json]

Adds a grant to a principal: PERMISSION (send, receive, browse, manage) on PATTERN
(queue:GLOB or topic:GLOB, '*' matching any run of characters), or admin or metrics,
which need no pattern. It takes effect on the principal's next request.`, `
okiba principal grant shop send queue:orders-*
okiba principal grant ops manage topic:*
okiba principal grant prometheus metrics`
	if c.op == "revoke" {
		usage, examples = `
Usage: okiba principal revoke NAME PERMISSION [PATTERN] [--json]

Removes a grant from a principal, as it was granted (revoking send queue:orders-1 does
not narrow send queue:orders-*); a grant it does not hold is no error. It takes effect
on the principal's next request.`, `
okiba principal revoke shop send queue:orders-*`
	}
	f := c.app.serverFlags(c.name, usage, examples)
	asJSON := f.Bool("json", false, "print the principal as the API's JSON")
	pos, cl, err := f.clientArgs(args, 2, 3, "NAME PERMISSION [PATTERN]")
	if err != nil {
		return err
	}
	grant := strings.Join(pos[1:], " ")
	change, did := cl.GrantPrincipal, "granted"
	if c.op == "revoke" {
		change, did = cl.RevokePrincipal, "revoked"
	}
	p, err := change(ctx, pos[0], grant)
	if err != nil {
		return err
	}
	if *asJSON {
		return printJSONIndent(c.app.Stdout, p)
	}
	fmt.Fprintf(c.app.Stdout, "%s %s %s; its grants: %s\n", did, p.Name, grant, grantsText(p.Grants))
	return nil
}

// ---------------------------------------------------------------------------------------

type principalRotateCmd struct {
	app  *app
	name string
}

func (c *principalRotateCmd) Run(ctx context.Context, args []string) error {
	f := c.app.serverFlags(c.name, `
Usage: okiba principal rotate NAME [--keep 24h] [--json]

Gives a principal a new secret and prints it on stdout, once. Its current secret stays
valid for --keep more, so that its programs can move to the new one; --keep 0s ends it
now, with the console sessions signed in with it.`, `
okiba principal rotate shop
okiba principal rotate shop --keep 1h
okiba principal rotate leaked --keep 0s`)
	keep := f.Duration("keep", api.DefaultRotateKeep, "how long the current secret stays valid beside the new one; 0s ends it now")
	asJSON := f.Bool("json", false, "print the principal and its new secret as the API's JSON")
	pos, err := f.parseArgs(args, 1, 1, "NAME [--keep DURATION]")
	if err != nil {
		return err
	}
	if *keep < 0 {
		return f.fail("--keep must not be negative, got %v", *keep)
	}
	cl, err := f.client()
	if err != nil {
		return err
	}
	s, err := cl.RotatePrincipal(ctx, pos[0], *keep)
	if err != nil {
		return err
	}
	if *asJSON {
		if err := printJSONIndent(c.app.Stdout, s); err != nil {
			return err
		}
		fmt.Fprintln(c.app.Stderr, "The secret will not be shown again: store it now.")
		return nil
	}
	old := "its old secret no longer works"
	if n := len(s.Principal.Secrets); n > 1 && s.Principal.Secrets[n-2].ExpiresAt != nil {
		old = "its old secret works until " + s.Principal.Secrets[n-2].ExpiresAt.Format(time.RFC3339)
	}
	printSecret(c.app, fmt.Sprintf("rotated principal %s (%s); its new secret:", s.Principal.Name, old), s)
	return nil
}

// ---------------------------------------------------------------------------------------

type principalDeleteCmd struct {
	app  *app
	name string
}

func (c *principalDeleteCmd) Run(ctx context.Context, args []string) error {
	f := c.app.serverFlags(c.name, `
Usage: okiba principal delete NAME

Deletes a principal: its secrets stop working at once, and so do the console sessions
signed in with them. Principals declared in the server's configuration are removed
there.`, `
okiba principal delete shop`)
	pos, cl, err := f.clientArgs(args, 1, 1, "NAME")
	if err != nil {
		return err
	}
	if err := cl.DeletePrincipal(ctx, pos[0]); err != nil {
		return err
	}
	fmt.Fprintf(c.app.Stdout, "deleted principal %s\n", pos[0])
	return nil
}

// ---------------------------------------------------------------------------------------

type tokenCmd struct{ app *app }

func (c *tokenCmd) Run(ctx context.Context, args []string) error {
	f := c.app.flags("token", `
Usage: okiba token

Prints a fresh secret: "okiba_" and 160 random bits. Use it as the server's
--auth-token (OKIBA_AUTH_TOKEN), or as the secret of a principal declared in the
configuration file; it talks to no server.`, `
okiba token > /etc/okiba/token
OKIBA_AUTH_TOKEN=$(okiba token) okiba serve --addr 0.0.0.0:7070`)
	if _, err := f.parseArgs(args, 0, 0, ""); err != nil {
		return err
	}
	fmt.Fprintln(c.app.Stdout, auth.NewSecret())
	return nil
}
