package cluster

import (
	"net"
	"time"

	"golang.org/x/sys/unix"
)

// setUserTimeout has the kernel end conn once bytes it sent have gone unacknowledged
// for d (TCP_USER_TIMEOUT). A connection that cannot take the option keeps without it.
func setUserTimeout(conn net.Conn, d time.Duration) {
	tc, ok := conn.(*net.TCPConn)
	if !ok {
		return
	}
	raw, err := tc.SyscallConn()
	if err != nil {
		return
	}
	raw.Control(func(fd uintptr) {
		unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT, int(d.Milliseconds()))
	})
}
