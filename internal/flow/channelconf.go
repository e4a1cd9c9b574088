package flow

import (
	"math"
	"time"

	"github.com/sluicehq/sluice/internal/config"
)

// ChannelLimits are the settings every bounded channel reads the same way:
// Flume's capacity, transactionCapacity and keep-alive.
type ChannelLimits struct {
	Capacity            int
	TransactionCapacity int
	KeepAlive           time.Duration
}

// ReadChannelLimits reads capacity, transactionCapacity (at most capacity)
// and keep-alive (seconds, decimals allowed) from p with the given
// defaults, recording a problem for each bad value and using its default.
func ReadChannelLimits(p *config.Props, def ChannelLimits) ChannelLimits {
	l := def
	l.Capacity = p.Int("capacity", def.Capacity)
	if l.Capacity < 1 {
		p.Errorf("capacity", "%d is not a positive number of events; the default is %d", l.Capacity, def.Capacity)
		l.Capacity = def.Capacity
	}
	l.TransactionCapacity = p.Int("transactionCapacity", def.TransactionCapacity)
	switch {
	case l.TransactionCapacity < 1:
		p.Errorf("transactionCapacity", "%d is not a positive number of events; the default is %d", l.TransactionCapacity, def.TransactionCapacity)
		l.TransactionCapacity = min(def.TransactionCapacity, l.Capacity)
	case l.TransactionCapacity > l.Capacity:
		p.Errorf("transactionCapacity", "%d is larger than capacity %d; a transaction must fit in the channel: raise capacity or lower transactionCapacity", l.TransactionCapacity, l.Capacity)
		l.TransactionCapacity = l.Capacity
	}
	ka := p.Float("keep-alive", def.KeepAlive.Seconds())
	if ka < 0 || ka > 24*3600 || math.IsNaN(ka) {
		p.Errorf("keep-alive", "%v is not a number of seconds from 0 to 86400", ka)
		ka = def.KeepAlive.Seconds()
	}
	l.KeepAlive = time.Duration(ka * float64(time.Second))
	return l
}
