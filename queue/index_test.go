package queue

import "testing"

// The arena reuses freed slots before it makes chunks, and gives empty chunks back (but
// one), so its memory follows the live count, not its history.
func TestArenaFollowsTheLiveCount(t *testing.T) {
	t.Parallel()
	var a arena
	seen := map[Ref]bool{}
	var xs []*message
	for i := range 20_000 {
		x := a.alloc()
		if x.self == 0 || seen[x.self] || a.get(x.self) != x || x.hidx != -1 {
			t.Fatalf("alloc %d: ref %d (seen %v), get %p, x %p", i, x.self, seen[x.self], a.get(x.self), x)
		}
		seen[x.self] = true
		x.id = uint64(i)
		xs = append(xs, x)
	}
	full := a.nchunks
	// Free every other one: no chunk empties, and the next 10,000 fill the holes.
	for i := 0; i < len(xs); i += 2 {
		a.free(xs[i])
	}
	for i := 1; i < len(xs); i += 2 {
		if xs[i].id != uint64(i) || a.get(xs[i].self) != xs[i] {
			t.Fatalf("message %d changed when its neighbours were freed", i)
		}
	}
	for i := 0; i < len(xs); i += 2 {
		xs[i] = a.alloc()
	}
	if a.nchunks != full {
		t.Fatalf("%d chunks after refilling holes, %d before", a.nchunks, full)
	}
	for _, x := range xs {
		a.free(x)
	}
	if a.nchunks != 1 {
		t.Fatalf("%d chunks kept with nothing live, want 1", a.nchunks)
	}
	if x := a.alloc(); a.nchunks != 1 || a.get(x.self) != x {
		t.Fatalf("after emptying: %d chunks", a.nchunks)
	}
}

// Groups and extensions hold their slots while a message names them.
func TestArenaSlotsForGroupsAndExtensions(t *testing.T) {
	t.Parallel()
	var a arena
	x, y := a.alloc(), a.alloc()
	g := &group{key: "k"}
	a.setGroup(x, g)
	a.setGroup(y, g)
	if a.group(x) != g || a.group(y) != g || g.refs != 2 {
		t.Fatalf("group not set: %v %v refs %d", a.group(x), a.group(y), g.refs)
	}
	a.free(x)
	if a.group(y) != g || len(a.freeGroup) != 0 {
		t.Fatalf("group slot given back while y names it")
	}
	a.setGroup(y, nil)
	if a.group(y) != nil || len(a.freeGroup) != 1 || a.groups[g.slot] != nil {
		t.Fatalf("group slot kept with no message naming it")
	}
	d := &DeadInfo{Reason: "r"}
	a.setDead(y, d)
	if a.dead(y) != d || len(a.exts) != 1 {
		t.Fatalf("ext: %v %d", a.dead(y), len(a.exts))
	}
	a.setDead(y, nil)
	if y.ext != 0 || len(a.freeExt) != 1 {
		t.Fatalf("empty ext kept: %d", y.ext)
	}
	z := a.alloc()
	a.setDead(z, d)
	if z.ext != 1 || len(a.freeExt) != 0 {
		t.Fatalf("ext slot not reused: %d", z.ext)
	}
}

// Through the machine: a drained queue gives its memory back.
func TestDrainedQueueGivesBackItsChunks(t *testing.T) {
	t.Parallel()
	m, s := newMachine(t, "q", func(c *Config) { c.OrderedGroups = true })
	in := make([]SendInput, 1000)
	for i := range in {
		in[i] = SendInput{Payload: Payload{Body: []byte("x"), Group: string(rune('a' + i%7))}, Delay: -1}
	}
	for range 50 {
		if _, err := m.Send(t0, s, "q", in); err != nil {
			t.Fatal(err)
		}
	}
	if m.ar.nchunks < 10 {
		t.Fatalf("50k messages in %d chunks", m.ar.nchunks)
	}
	for now := t0; m.Depth("q") > 0; now++ {
		ds, err := m.Receive(now, s, "q", 1000, 30_000, 0)
		if err != nil || len(ds) == 0 {
			t.Fatalf("receive: %v (%d left)", err, m.Depth("q"))
		}
		ls := make([]Lease, len(ds))
		for i, d := range ds {
			ls[i] = d.Lease
		}
		if _, err := m.Ack(now, s, "q", ls); err != nil {
			t.Fatal(err)
		}
	}
	live := 0
	for _, g := range m.ar.groups {
		if g != nil {
			live++
		}
	}
	if m.ar.nchunks != 1 || live != 0 || len(m.ar.exts) != len(m.ar.freeExt) {
		t.Fatalf("after draining: %d chunks, %d groups, %d of %d exts free", m.ar.nchunks, live, len(m.ar.freeExt), len(m.ar.exts))
	}
}

// TestWalkVisitsAHeapInOrder: a walk of a heap yields its slots in the order pops would,
// and leaves the heap as it was.
func TestWalkVisitsAHeapInOrder(t *testing.T) {
	for _, bySeq := range []bool{true, false} {
		var a arena
		h := newHeap(&a)
		if bySeq {
			h = newReadyHeap(&a)
		}
		for i := range 500 {
			x := a.alloc()
			x.seq = uint64((i * 7919) % 1000) // every order of arrival
			if !bySeq {
				x.at = int64((i * 104729) % 37)
			}
			h.push(x)
		}
		before := append([]Ref(nil), h.h...)
		w := h.walk()
		var walked []*message
		for x := w.pop(); x != nil; x = w.pop() {
			walked = append(walked, x)
		}
		for i, r := range before {
			if h.h[i] != r {
				t.Fatalf("bySeq %v: the walk moved slot %d", bySeq, i)
			}
		}
		if len(walked) != len(before) {
			t.Fatalf("bySeq %v: walked %d of %d slots", bySeq, len(walked), len(before))
		}
		for i, x := range walked {
			if y := h.pop(); y != x {
				t.Fatalf("bySeq %v: walk %d gave (%d, %d), pop (%d, %d)", bySeq, i, x.at, x.seq, y.at, y.seq)
			}
		}
	}
}
