package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/okiba/okiba/api"
)

// clusterGroup is okiba cluster: what a node knows of its replicated cluster.
func clusterGroup(a *app) command {
	return &group{app: a, name: "cluster", usage: `
Usage: okiba cluster SUBCOMMAND [flags]

A replicated cluster's members, leader and progress (docs/cluster.md). The founders
come from --peers; later members join (okiba serve --join URL) or are added here, and
are removed here. add, remove and members need the admin permission.`,
		subs: []entry{
			{"status", "the node's view: its role, the leader, the term, commit and applied index, the members", func(a *app, _ string) command { return &clusterStatusCmd{app: a} }},
			{"members", "list the members with their URLs and whether each votes", func(a *app, _ string) command { return &clusterMembersCmd{app: a, op: "members"} }},
			{"add", "add a member (a learner until it has caught up)", func(a *app, _ string) command { return &clusterMembersCmd{app: a, op: "add"} }},
			{"remove", "remove a member (the leader hands its lead over first)", func(a *app, _ string) command { return &clusterMembersCmd{app: a, op: "remove"} }},
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

type clusterMembersCmd struct {
	app *app
	op  string
}

func (c *clusterMembersCmd) Run(ctx context.Context, args []string) error {
	usage := map[string][2]string{
		"members": {"Usage: okiba cluster members [--server URL] [--json]\n\nLists the members: name, raft id, URL, and whether each votes or is a learner catching up.", "okiba cluster members"},
		"add":     {"Usage: okiba cluster add NAME URL [--server URL]\n\nAdds a member, a learner that the leader promotes to a voter once it has caught up. Start\nthe node with okiba serve --node NAME --peers NAME=URL --join <a member's URL> on an empty\ndata directory (starting it that way alone also adds it).", "okiba cluster add n4 http://10.0.0.4:7070"},
		"remove":  {"Usage: okiba cluster remove NAME [--server URL]\n\nRemoves a member. Removing the leader hands its lead over first: run it again then.\nStop the removed node afterwards; never start it again on the same data directory.", "okiba cluster remove n4"},
	}[c.op]
	f := c.app.serverFlags("cluster "+c.op, "\n"+usage[0], "\n"+usage[1])
	asJSON := f.Bool("json", false, "print the API's JSON")
	n := map[string]int{"members": 0, "add": 2, "remove": 1}[c.op]
	pos, cl, err := f.clientArgs(args, n, n, map[string]string{"members": "", "add": "NAME URL", "remove": "NAME"}[c.op])
	if err != nil {
		return err
	}
	var members []api.ClusterMember
	switch c.op {
	case "members":
		members, err = cl.ClusterMembers(ctx)
	case "add":
		members, err = cl.AddClusterMember(ctx, pos[0], pos[1])
	case "remove":
		members, err = cl.RemoveClusterMember(ctx, pos[0])
	}
	if err != nil {
		return err
	}
	if *asJSON {
		return printJSONIndent(c.app.Stdout, api.ClusterMembers{Members: members})
	}
	for _, m := range members {
		role := "voter"
		if m.Learner {
			role = "learner"
		}
		fmt.Fprintf(c.app.Stdout, "%-10s id %-3d %-7s %s\n", m.Name, m.ID, role, m.URL)
	}
	return nil
}
