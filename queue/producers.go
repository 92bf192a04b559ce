package queue

import (
	"errors"
	"fmt"
	"slices"
)

// Idempotent sends. A send retried after its answer was lost (a connection that broke,
// a leader that died before answering) would enqueue its messages twice; dedup ids
// avoid that only when the caller gives one, within its window. A producer instead names
// each send request by (producer id, sequence): the machine remembers the answers of
// the last ProducerWindow requests of each producer, and a request it has answered
// returns the same answer again — the original message ids — emitting nothing. The
// producer ids are the client's to get (the broker hands out fresh random ones); the
// answers are replicated state, in ProducerRecords and snapshots, so a retry reaching a
// new leader after a failover is recognised too.
const (
	// ProducerWindow is how many answered requests the machine remembers per producer:
	// a retry of an older one is refused with ErrSequenceTooOld.
	ProducerWindow = 64
	// ProducerIdle is how long a producer is remembered after its last request (Unix ms).
	ProducerIdle = int64(24 * 60 * 60 * 1000)
	// MaxProducers bounds the producers remembered; past it the least recently used is
	// forgotten (its retries then run again).
	MaxProducers = 100_000
	// MaxProducerIDLen bounds a producer id.
	MaxProducerIDLen = 64
	// producerSweep is how often (in the records' time) idle producers are forgotten.
	producerSweep = int64(60 * 60 * 1000)
)

// Errors of SendFrom.
var (
	// ErrSequenceTooOld: the request's sequence is older than every one the producer's
	// window holds: its answer is forgotten. Nothing was sent.
	ErrSequenceTooOld = errors.New("the producer's sequence is older than the answers kept for it: its answer is forgotten")
	// ErrSequenceReused: the sequence was answered for a send to another queue: a
	// producer numbers each request once.
	ErrSequenceReused = errors.New("the producer's sequence was already used by a send to another queue")
	// ErrNotRepeated: this entry of the original request failed, and its failure is not
	// kept: send it again in a request of its own.
	ErrNotRepeated = errors.New("this message failed in the original request, whose failures are not kept: send it again in a new request")
)

// ProducerResult is what the machine keeps of one message's answer.
type ProducerResult struct {
	ID, Seq   uint64
	Duplicate bool
	Failed    bool
}

type producerState struct {
	lastUsed int64
	queueOf  map[uint64]uint64 // by request sequence: the queue sent to
	answers  map[uint64][]ProducerResult
	seqs     []uint64 // ascending
}

// ProducerRecord: a producer's request seq sent to queue QueueID was answered Results.
type ProducerRecord struct {
	Now      int64
	Producer string
	Seq      uint64
	QueueID  uint64
	Results  []ProducerResult
}

func (r *ProducerRecord) Kind() Kind  { return KindProducer }
func (r *ProducerRecord) Time() int64 { return r.Now }

func (r *ProducerRecord) AppendTo(b []byte) []byte {
	b = header(b, KindProducer, r.Now)
	b = appendString(b, r.Producer)
	b = appendUvarint(b, r.Seq)
	b = appendUvarint(b, r.QueueID)
	return appendProducerResults(b, r.Results)
}

func appendProducerResults(b []byte, rs []ProducerResult) []byte {
	b = appendUvarint(b, uint64(len(rs)))
	for _, x := range rs {
		b = appendUvarint(b, x.ID)
		b = appendUvarint(b, x.Seq)
		var f byte
		if x.Duplicate {
			f |= 1
		}
		if x.Failed {
			f |= 2
		}
		b = append(b, f)
	}
	return b
}

func (d *decoder) producerResults() []ProducerResult {
	n := d.count()
	out := make([]ProducerResult, 0, n)
	for i := 0; i < n && d.err == nil; i++ {
		x := ProducerResult{ID: d.uvarint(), Seq: d.uvarint()}
		f := d.byte()
		if f > 3 {
			d.fail(fmt.Errorf("producer result flags %#x", f))
		}
		x.Duplicate, x.Failed = f&1 != 0, f&2 != 0
		out = append(out, x)
	}
	return out
}

func (r *ProducerRecord) decode(d *decoder, now int64) {
	r.Now = now
	r.Producer = d.string()
	r.Seq = d.uvarint()
	r.QueueID = d.uvarint()
	r.Results = d.producerResults()
}

func (r *ProducerRecord) apply(m *Machine) error {
	if err := checkProducer(r.Producer, r.Seq); err != nil {
		return fmt.Errorf("producer record: %w", err)
	}
	m.rememberAnswer(r.Now, r.Producer, r.Seq, r.QueueID, r.Results)
	return nil
}

func checkProducer(id string, seq uint64) error {
	if id == "" || len(id) > MaxProducerIDLen || !printable(id) {
		return &InvalidError{Field: "producer_id", Reason: fmt.Sprintf("must be 1..%d printable ASCII characters", MaxProducerIDLen)}
	}
	if seq == 0 {
		return &InvalidError{Field: "sequence", Reason: "must be at least 1"}
	}
	return nil
}

// rememberAnswer keeps one answered request, forgetting the producer's oldest beyond
// the window, the producers idle for ProducerIdle (once per producerSweep of the
// records' time) and, past MaxProducers, the least recently used. All of it follows
// from the records and their times, so every replica forgets alike.
func (m *Machine) rememberAnswer(now int64, id string, seq, queueID uint64, rs []ProducerResult) {
	if m.producers == nil {
		m.producers = map[string]*producerState{}
	}
	if now-m.producersSwept >= producerSweep {
		m.producersSwept = now
		for pid, p := range m.producers {
			if now-p.lastUsed >= ProducerIdle {
				delete(m.producers, pid)
			}
		}
	}
	p := m.producers[id]
	if p == nil {
		if len(m.producers) >= MaxProducers {
			var oldest string
			for pid, q := range m.producers {
				if oldest == "" || q.lastUsed < m.producers[oldest].lastUsed || q.lastUsed == m.producers[oldest].lastUsed && pid < oldest {
					oldest = pid
				}
			}
			delete(m.producers, oldest)
		}
		p = &producerState{queueOf: map[uint64]uint64{}, answers: map[uint64][]ProducerResult{}}
		m.producers[id] = p
	}
	p.lastUsed = max(p.lastUsed, now)
	if _, ok := p.answers[seq]; ok {
		return
	}
	i, _ := slices.BinarySearch(p.seqs, seq)
	p.seqs = slices.Insert(p.seqs, i, seq)
	p.answers[seq], p.queueOf[seq] = rs, queueID
	for len(p.seqs) > ProducerWindow {
		delete(p.answers, p.seqs[0])
		delete(p.queueOf, p.seqs[0])
		p.seqs = p.seqs[1:]
	}
}

// SendFrom is Send for request seq of a producer: a request the machine has answered
// returns that answer again (repeated true) and emits nothing; a new one is sent, and
// its answer remembered in a ProducerRecord. A request refused as a whole (the queue is
// gone, the arguments are wrong) is not remembered: nothing happened.
func (m *Machine) SendFrom(now int64, sink Sink, queue, producer string, seq uint64, msgs []SendInput) (out []SendResult, repeated bool, err error) {
	if err := checkProducer(producer, seq); err != nil {
		return nil, false, err
	}
	q, err := m.queue(queue)
	if err != nil {
		return nil, false, err
	}
	if p := m.producers[producer]; p != nil {
		if rs, ok := p.answers[seq]; ok {
			if p.queueOf[seq] != q.id {
				return nil, false, fmt.Errorf("%w: producer %s, sequence %d", ErrSequenceReused, producer, seq)
			}
			out = make([]SendResult, len(rs))
			for i, x := range rs {
				out[i] = SendResult{ID: x.ID, Seq: x.Seq, Duplicate: x.Duplicate}
				if x.Failed {
					out[i] = SendResult{Err: ErrNotRepeated}
				}
			}
			return out, true, nil
		}
		if len(p.seqs) >= ProducerWindow && seq < p.seqs[0] {
			return nil, false, fmt.Errorf("%w: producer %s, sequence %d; the oldest kept is %d", ErrSequenceTooOld, producer, seq, p.seqs[0])
		}
	}
	out, err = m.Send(now, sink, queue, msgs)
	if err != nil {
		return nil, false, err
	}
	rs := make([]ProducerResult, len(out))
	for i, r := range out {
		rs[i] = ProducerResult{ID: r.ID, Seq: r.Seq, Duplicate: r.Duplicate, Failed: r.Err != nil}
	}
	m.emit(sink, &ProducerRecord{Now: m.clock(now), Producer: producer, Seq: seq, QueueID: q.id, Results: rs})
	return out, false, nil
}

// Producers is how many producers the machine remembers.
func (m *Machine) Producers() int { return len(m.producers) }

// appendProducers appends the snapshot's producers section (version 6): the last sweep,
// then each producer by id with its answers by sequence.
func (m *Machine) appendProducers(b []byte) []byte {
	b = appendVarint(b, m.producersSwept)
	ids := make([]string, 0, len(m.producers))
	for id := range m.producers {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	b = appendUvarint(b, uint64(len(ids)))
	for _, id := range ids {
		p := m.producers[id]
		b = appendString(b, id)
		b = appendVarint(b, p.lastUsed)
		b = appendUvarint(b, uint64(len(p.seqs)))
		for _, s := range p.seqs {
			b = appendUvarint(b, s)
			b = appendUvarint(b, p.queueOf[s])
			b = appendProducerResults(b, p.answers[s])
		}
	}
	return b
}

func (m *Machine) restoreProducers(d *decoder) error {
	m.producersSwept = d.varint()
	n := d.count()
	for i := 0; i < n && d.err == nil; i++ {
		id := d.string()
		p := &producerState{lastUsed: d.varint(), queueOf: map[uint64]uint64{}, answers: map[uint64][]ProducerResult{}}
		k := d.count()
		for j := 0; j < k && d.err == nil; j++ {
			s := d.uvarint()
			if len(p.seqs) > 0 && s <= p.seqs[len(p.seqs)-1] {
				return fmt.Errorf("restore: producer %q: sequences out of order", id)
			}
			p.seqs = append(p.seqs, s)
			p.queueOf[s] = d.uvarint()
			p.answers[s] = d.producerResults()
		}
		if m.producers == nil {
			m.producers = map[string]*producerState{}
		}
		if err := checkProducer(id, 1); err != nil || m.producers[id] != nil || len(p.seqs) > ProducerWindow {
			return fmt.Errorf("restore: producer %q is inconsistent", id)
		}
		m.producers[id] = p
	}
	return nil
}
