package systems

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// The cluster systems' configurations, generated without starting anything: each
// member names every other one where the peer's syntax wants it, never itself, and no
// two members share a port or a directory.

func TestOkibaNodeArgs(t *testing.T) {
	nodes := []okibaNode{{"n1", "127.0.0.1:7071", "/d/n1"}, {"n2", "127.0.0.1:7072", "/d/n2"}, {"n3", "127.0.0.1:7073", "/d/n3"}}
	want := "n1=http://127.0.0.1:7071,n2=http://127.0.0.1:7072,n3=http://127.0.0.1:7073"
	if got := okibaPeers(nodes); got != want {
		t.Fatalf("peers = %q, want %q", got, want)
	}
	for _, n := range nodes {
		args := okibaNodeArgs(n, nodes, "/d/secret")
		flag := func(name string) string {
			i := slices.Index(args, name)
			if i < 0 || i+1 >= len(args) {
				t.Fatalf("%s: no %s in %v", n.name, name, args)
			}
			return args[i+1]
		}
		if args[0] != "serve" || flag("--node") != n.name || flag("--addr") != n.addr || flag("--data") != n.dir ||
			flag("--peers") != want || flag("--cluster-secret-file") != "/d/secret" {
			t.Errorf("%s: args %v", n.name, args)
		}
	}
}

func TestNatsClusterConf(t *testing.T) {
	var nodes []natsNode
	for i := 1; i <= clusterSize; i++ {
		nodes = append(nodes, natsNode{name: fmt.Sprintf("n%d", i), client: 4220 + i, routePort: 6220 + i, dir: fmt.Sprintf("/d/n%d", i)})
	}
	for _, n := range nodes {
		conf := natsClusterConf(n, nodes)
		for _, want := range []string{
			"server_name: " + n.name + "\n",
			fmt.Sprintf("listen: 127.0.0.1:%d\n", n.client),
			fmt.Sprintf("listen: 127.0.0.1:%d\n", n.routePort),
			fmt.Sprintf("store_dir: %q", n.dir+"/js"),
			"sync_interval: always",
			"name: okibabench",
		} {
			if !strings.Contains(conf, want) {
				t.Errorf("%s: config lacks %q:\n%s", n.name, want, conf)
			}
		}
		for _, o := range nodes {
			route := fmt.Sprintf("nats-route://127.0.0.1:%d", o.routePort)
			if has := strings.Contains(conf, route); has != (o.name != n.name) {
				t.Errorf("%s: route to %s present = %v:\n%s", n.name, o.name, has, conf)
			}
		}
	}
}

func TestRabbitClusterConf(t *testing.T) {
	names := map[string]bool{}
	for i := 1; i <= clusterSize; i++ {
		names[rabbitNodeName(i)] = true
	}
	if len(names) != clusterSize {
		t.Fatalf("node names not distinct: %v", names)
	}
	conf := rabbitConf(5673, 0)
	if !strings.Contains(conf, "listeners.tcp.default = 127.0.0.1:5673\n") || strings.Contains(conf, "stream.") {
		t.Errorf("a cluster node's config (AMQP only, loopback):\n%s", conf)
	}
	if conf := rabbitConf(5673, 5552); !strings.Contains(conf, "stream.listeners.tcp.1 = 127.0.0.1:5552\n") {
		t.Errorf("the single node's config has no stream listener:\n%s", conf)
	}
	s := &rabbitServer{dir: "/d/n2", nodename: rabbitNodeName(2), epmdPrt: 4370}
	env := s.cliEnv()
	for _, want := range []string{"HOME=/d/n2/home", "RABBITMQ_NODENAME=okibabench-q2@localhost", "ERL_EPMD_PORT=4370"} {
		if !slices.Contains(env, want) {
			t.Errorf("cli env %v lacks %s", env, want)
		}
	}
	if s.procName() != "rabbitmq-okibabench-q2" {
		t.Errorf("procName = %q", s.procName())
	}
	c1, _ := rabbitCookie()
	c2, _ := rabbitCookie()
	if len(c1) != 20 || c1 == c2 || strings.Trim(c1, "ABCDEFGHIJKLMNOPQRSTUVWXYZ") != "" {
		t.Errorf("cookies %q, %q", c1, c2)
	}
}

// TestQuorumMembers reads rabbitmq-queues quorum_status --formatter json as RabbitMQ
// 3.10 prints it: the check that a measured queue has a member on every node.
func TestQuorumMembers(t *testing.T) {
	three := `[
{"Node Name":"okibabench-q1@localhost","Raft State":"leader","Log Index":2,"Commit Index":2,"Snapshot Index":"undefined","Term":1,"Machine Version":2}
,{"Node Name":"okibabench-q3@localhost","Raft State":"follower","Log Index":2,"Commit Index":2,"Snapshot Index":"undefined","Term":1,"Machine Version":2}
,{"Node Name":"okibabench-q2@localhost","Raft State":"follower","Log Index":2,"Commit Index":2,"Snapshot Index":"undefined","Term":1,"Machine Version":2}
]`
	one := `[{"Node Name":"okibabench-q1@localhost","Raft State":"leader"}]`
	for in, want := range map[string]int{three: 3, one: 1, "Error: queue not found": -1, "[]": 0} {
		if got := quorumMembers(in); got != want {
			t.Errorf("quorumMembers(%.40q) = %d, want %d", in, got, want)
		}
	}
}
