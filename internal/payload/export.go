package payload

import (
	"fmt"

	"github.com/okiba/okiba/queue"
)

// Place puts a body that came from elsewhere (a restored export) into the log, as a
// relocation frame with no former position, and points ref at it. The frame is the
// store's own: replay of a log holding it needs the checkpoint taken after the import,
// which lists the frame's position as ref's (a restore takes one before it ends).
func (s *Store) Place(ref queue.Ref, id uint64, p *queue.Payload) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	frame := appendRelocate(nil, id, 0, p)
	to, t, err := s.log.Append(frame)
	if err != nil {
		return err
	}
	s.last = t
	s.set(ref, to)
	s.count(to, 1, p.Size())
	return nil
}

// PlaceTopic puts a retained topic record that came from elsewhere straight into its
// partition's files, at offset, beginning a file where newSegment says the machine's
// segment begins. Once a partition's records are placed, SyncTopics makes them durable.
func (s *Store) PlaceTopic(topicID uint64, part int, offset uint64, newSegment bool, raw []byte) error {
	k := partKey{topicID, part}
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.tp(k)
	if err := s.openLocked(k, p); err != nil {
		return err
	}
	if len(p.files.Segments()) == 0 {
		p.start = offset
	}
	if err := p.files.Append(offset, newSegment, raw); err != nil {
		return err
	}
	p.moved = offset + 1
	p.tailBase = offset + 1
	return nil
}

// SyncTopics makes every partition's placed records durable.
func (s *Store) SyncTopics() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, p := range s.topics.parts {
		if p.files == nil {
			continue
		}
		if _, err := p.files.Sync(); err != nil {
			return fmt.Errorf("payload: partition %d/%d: %w", k.topic, k.part, err)
		}
	}
	return nil
}
