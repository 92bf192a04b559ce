package topic

// dedupTable remembers the dedup ids a topic accepted within its window, and where each
// record went. Entries expire in the order they were made (the window of an entry is
// fixed when it is made, so a later change of the window leaves earlier entries as they
// were); a lookup also checks the entry's own expiry, so the order of expiry among
// entries made under different windows does not matter for correctness, only for how
// soon memory is given back.
type dedupTable struct {
	byID  map[string]*dedupEntry
	order []*dedupEntry // oldest first; order[head:] are live or evicted-but-not-popped
	head  int
}

type dedupEntry struct {
	id        string
	partition uint32
	offset    uint64
	at        int64 // publish time of the original
	expires   int64
	gone      bool
}

func (d *dedupTable) get(id string, now int64) (*dedupEntry, bool) {
	e, ok := d.byID[id]
	if !ok || e.expires <= now {
		return nil, false
	}
	return e, true
}

func (d *dedupTable) add(e *dedupEntry, cap int) {
	if d.byID == nil {
		d.byID = make(map[string]*dedupEntry)
	}
	if old, ok := d.byID[e.id]; ok {
		old.gone = true
	}
	d.byID[e.id] = e
	d.order = append(d.order, e)
	for len(d.byID) > cap {
		d.pop()
	}
}

func (d *dedupTable) pop() {
	e := d.order[d.head]
	d.order[d.head] = nil
	d.head++
	if !e.gone {
		delete(d.byID, e.id)
	}
	if d.head > 1024 && d.head*2 > len(d.order) {
		d.order = append([]*dedupEntry(nil), d.order[d.head:]...)
		d.head = 0
	}
}

// expire drops entries from the front that have expired.
func (d *dedupTable) expire(now int64) {
	for d.head < len(d.order) {
		e := d.order[d.head]
		if !e.gone && e.expires > now {
			return
		}
		d.pop()
	}
}

func (d *dedupTable) len() int { return len(d.byID) }

// each visits the live entries oldest first.
func (d *dedupTable) each(fn func(e *dedupEntry)) {
	for _, e := range d.order[d.head:] {
		if !e.gone {
			fn(e)
		}
	}
}
