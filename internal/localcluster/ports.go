package localcluster

import (
	"errors"
	"fmt"
	"net"
	"strconv"
)

// loopback is the only address the control plane listens on.
const loopback = "127.0.0.1"

// ErrPortInUse is returned (wrapped) when a port asked for explicitly is taken.
var ErrPortInUse = errors.New("port in use")

// freePort asks the kernel for a port that is free on the loopback address
// right now. Another process may take it before the component binds it; the
// launcher notices that from the component's log and retries with a new port.
func freePort() (int, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(loopback, "0"))
	if err != nil {
		return 0, fmt.Errorf("finding a free port on %s: %w", loopback, err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// checkPortFree returns ErrPortInUse when port cannot be bound on loopback.
func checkPortFree(port int, what string) error {
	l, err := net.Listen("tcp", net.JoinHostPort(loopback, strconv.Itoa(port)))
	if err != nil {
		return fmt.Errorf("%w: %s port %d on %s cannot be bound (%w): stop whatever holds it, or leave the port at 0 to pick a free one",
			ErrPortInUse, what, port, loopback, err)
	}
	return l.Close()
}
