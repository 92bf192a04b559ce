package queue

// RefID returns the id of the live message ref names: with Snapshot's visit, which gives
// refs in the canonical order, what an export writes beside each body so that a restore
// can check it puts each body on its own message.
func (m *Machine) RefID(ref Ref) uint64 { return m.ar.get(ref).id }
