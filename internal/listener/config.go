package listener

import (
	"math"
	"time"

	"github.com/sluicehq/sluice/internal/config"
)

// Names are a source's property names for its connection hygiene and
// memory budget, in the spelling of the source's family.
type Names struct {
	MaxConns, IdleTimeout, ProgressTimeout, MinRate, MaxBytesInFlight string
}

var (
	// DashNames are the avro and netcat sources' spelling (as Flume's
	// max-line-length, compression-type).
	DashNames = Names{"max-connections", "idle-timeout", "progress-timeout", "min-bytes-per-second", "max-bytes-in-flight"}
	// CamelNames are the syslog and http sources' spelling (as Flume's
	// eventSize, keepFields).
	CamelNames = Names{"maxConnections", "idleTimeout", "progressTimeout", "minBytesPerSecond", "maxBytesInFlight"}
)

// DefaultConfig is the hygiene of a TCP source that sets nothing.
var DefaultConfig = Config{
	MaxConns:        DefaultMaxConns,
	IdleTimeout:     DefaultIdleTimeout,
	ProgressTimeout: DefaultProgressTimeout,
	MinRate:         DefaultMinRate,
}

// ReadConfig reads a source's connection hygiene: the connection limit
// (1 or more), the idle and progress timeouts (milliseconds, 0 turns them
// off) and the minimum rate (bytes per second, 0 turns the progress rule
// off), with def's values as defaults.
func ReadConfig(p *config.Props, n Names, def Config) Config {
	ms := func(key string, d time.Duration) time.Duration {
		return time.Duration(p.IntRange(key, int(d/time.Millisecond), 0, math.MaxInt32)) * time.Millisecond
	}
	return Config{
		MaxConns:        p.IntRange(n.MaxConns, def.MaxConns, 1, math.MaxInt32),
		IdleTimeout:     ms(n.IdleTimeout, def.IdleTimeout),
		ProgressTimeout: ms(n.ProgressTimeout, def.ProgressTimeout),
		MinRate:         int64(p.IntRange(n.MinRate, int(def.MinRate), 0, math.MaxInt32)),
	}
}

// ReadBudget reads a source's memory budget in bytes, at least lo.
func ReadBudget(p *config.Props, n Names, def, lo int64) int64 {
	v := p.Int64(n.MaxBytesInFlight, def)
	if v < lo || v > math.MaxInt64/4 {
		p.Errorf(n.MaxBytesInFlight, "%d is out of range; use a number of bytes from %d", v, lo)
		return def
	}
	return v
}

// ReadPort reads a source's required port (0 to 65535; 0 lets the system
// pick a free one, for tests).
func ReadPort(p *config.Props, key string) int {
	if !p.Has(key) {
		p.Required(key)
		return 0
	}
	return p.IntRange(key, 0, 0, 65535)
}
