package client

import "time"

// lingerPolicy decides when a batch that is not full leaves: now, or at the end of its
// linger. It reads no clock: the owner passes the time.
type lingerPolicy struct {
	wait time.Duration // how long a batch waits for more after its first message; ≤ 0: not at all
	// adaptive (the default linger): a batch does not wait while no request is
	// outstanding, since nothing would come back to send it sooner, and waits at most
	// wait while one is, gathering what arrives meanwhile.
	adaptive bool
}

// decide says whether a batch whose first message came at opened may leave at now, with
// inFlight requests outstanding, and if not, until when it waits. A batch that waits
// leaves sooner if it fills, a flush or the close asks, or (adaptive) the outstanding
// requests all come back: the owner decides again on each of these.
func (lp lingerPolicy) decide(now, opened time.Time, inFlight int) (leave bool, until time.Time) {
	if !lp.lingers(inFlight) {
		return true, time.Time{}
	}
	until = opened.Add(lp.wait)
	return !now.Before(until), until
}

// lingers reports whether a batch may wait at all with inFlight requests outstanding;
// when it does not, the owner need not read the clock.
func (lp lingerPolicy) lingers(inFlight int) bool {
	return lp.wait > 0 && !(lp.adaptive && inFlight == 0)
}
