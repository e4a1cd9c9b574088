//go:build !linux

package syslog

import (
	"errors"
	"net"
)

func enableDropCount(*net.UDPConn) error {
	return errors.New("kernel drop counts are read on Linux only")
}

func dropCount([]byte) (uint32, bool) { return 0, false }
