package main

import (
	"context"
	"fmt"
	"strings"
)

// clusterGroup is okiba cluster: what a node knows of its replicated cluster.
func clusterGroup(a *app) command {
	return &group{app: a, name: "cluster", usage: `
Usage: okiba cluster SUBCOMMAND [flags]

A replicated cluster's members, leader and progress (docs/cluster.md). Membership is
fixed at the cluster's first start (--peers) for now.`,
		subs: []entry{
			{"status", "the node's view: its role, the leader, the term, commit and applied index, the members", func(a *app, _ string) command { return &clusterStatusCmd{app: a} }},
		}}
}

type clusterStatusCmd struct{ app *app }

func (c *clusterStatusCmd) Run(ctx context.Context, args []string) error {
	f := c.app.serverFlags("cluster status", `
Usage: okiba cluster status [--server URL] [--json]

Asks a node of a cluster (its /healthz, which needs no token) what it knows: its name
and role — leader, follower, or no_leader while an election runs or a majority is
unreachable —, the leader, the raft term, the last entry it knows committed and the
last its broker applied, and the members. Ask each node for its own view; a node whose
applied index stays behind the leader's commit index is catching up.`, `
okiba cluster status --server http://10.0.0.2:7070`)
	asJSON := f.Bool("json", false, "print the API's JSON")
	_, cl, err := f.clientArgs(args, 0, 0, "[--json]")
	if err != nil {
		return err
	}
	h, err := cl.HealthStatus(ctx)
	if err != nil {
		return fmt.Errorf("%s does not answer: %w", cl.Server(), err)
	}
	if h.Cluster == nil {
		return fmt.Errorf("%s is a single node, not a member of a cluster", cl.Server())
	}
	if *asJSON {
		return printJSONIndent(c.app.Stdout, h.Cluster)
	}
	s := h.Cluster
	out := c.app.Stdout
	fmt.Fprintf(out, "node     %s (%s)\n", s.Node, s.Role)
	leader := s.Leader
	if leader == "" {
		leader = "none known"
	}
	fmt.Fprintf(out, "leader   %s\n", leader)
	fmt.Fprintf(out, "term     %d\n", s.Term)
	fmt.Fprintf(out, "commit   %d\n", s.Commit)
	fmt.Fprintf(out, "applied  %d\n", s.Applied)
	fmt.Fprintf(out, "members  %s\n", strings.Join(s.Members, ", "))
	return nil
}
