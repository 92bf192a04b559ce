//go:build !linux

package cluster

import (
	"net"
	"time"
)

// setUserTimeout does nothing here: a stream to a peer cut off ends when its writes
// stall (streamWriteTimeout) or the receiver's idle deadline passes.
func setUserTimeout(net.Conn, time.Duration) {}
