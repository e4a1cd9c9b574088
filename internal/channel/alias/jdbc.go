package aliaschannel

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice/internal/channel/file"
	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/flow"
)

// DefaultJDBCCapacity is the capacity of a JDBC channel without
// maximum.capacity: Flume's is unlimited (the database grows until its disk
// is full); sluice's file channel needs a bound, and pushes back at it.
const DefaultJDBCCapacity = filechannel.DefaultCapacity

// jdbcIgnored are the JDBC channel's database keys, which mean nothing to a
// file channel.
var jdbcIgnored = []string{"db.type", "driver.class", "db.username", "db.password", "connection.properties.file",
	"create.schema", "create.index", "create.foreignkey", "transaction.isolation", "maximum.connections"}

// NewJDBC builds Flume's JDBC channel (jdbc,
// org.apache.flume.channel.jdbc.JdbcChannel) as a file channel. Flume's JDBC
// channel keeps its events in an embedded Derby database, by default under
// ~/.flume/jdbc-channel (driver.url jdbc:derby:DIR/db;create=true): local
// files, durable across a crash. sluice's file channel keeps them on the
// same disk with the same guarantee, in DIR/sluice-checkpoint and
// DIR/sluice-data; its capacity is maximum.capacity, or DefaultJDBCCapacity
// for Flume's unlimited. A driver.url naming another database (MySQL, or
// Derby over the network) is refused: moving events from a shared database
// to this host's disk is a change the user must choose. Flume's Derby
// database is not read: while it is there, Start refuses (see jdbcChannel).
func NewJDBC(env flow.Env, p *config.Props) (flow.Channel, error) {
	home, _ := os.UserHomeDir()
	if h := p.String("sysprop.user.home", ""); h != "" {
		home = h
	}
	for _, k := range jdbcIgnored {
		p.Ignored(k, "a database setting; the events are in sluice's file channel")
	}
	for _, k := range p.Keys("sysprop.") {
		if k != "sysprop.user.home" {
			p.Ignored(k, "a Derby setting; the events are in sluice's file channel")
		}
	}
	capacity := DefaultJDBCCapacity
	if p.Has("maximum.capacity") {
		if n := p.IntRange("maximum.capacity", 0, 0, math.MaxInt32); n > 0 {
			capacity = n
		}
	}
	dir := filepath.Join(home, ".flume", "jdbc-channel")
	derby := filepath.Join(dir, "db")
	if u := strings.TrimSpace(p.String("driver.url", "")); u != "" {
		path, ok := strings.CutPrefix(u, "jdbc:derby:")
		path, _, _ = strings.Cut(path, ";")
		if !ok || strings.HasPrefix(path, "//") || path == "" {
			p.Errorf("driver.url", "%q is not an embedded Derby database: sluice runs a JDBC channel as its file channel on this host's disk, and will not move events from a shared database here unasked; use type = file (or kafka, to share the channel)", u)
			return filechannel.New(env, p)
		}
		// The database's directory holds the file channel's directories.
		derby = filepath.Clean(path)
		dir = filepath.Dir(derby)
	}
	p.Set("capacity", strconv.Itoa(capacity), "maximum.capacity")
	if !p.Has("transactionCapacity") && capacity < filechannel.DefaultTransactionCapacity {
		p.Set("transactionCapacity", strconv.Itoa(capacity), "maximum.capacity")
	}
	p.Set("checkpointDir", filepath.Join(dir, "sluice-checkpoint"), "driver.url")
	p.Set("dataDirs", filepath.Join(dir, "sluice-data"), "driver.url")
	p.Notef("type", "runs as a file channel of %d events in %s (sluice-checkpoint, sluice-data): on local disk and durable, as Flume's embedded Derby database",
		capacity, dir)
	ch, err := filechannel.New(env, p)
	if err != nil {
		return nil, err
	}
	return &jdbcChannel{Channel: ch.(*filechannel.Channel), derby: derby}, nil
}

// jdbcChannel is the file channel that stands for a JDBC channel: it will
// not start beside a Flume Derby database, whose events it cannot read.
type jdbcChannel struct {
	*filechannel.Channel
	derby string // where Flume's Derby database is, or would be
}

// Start refuses while Flume's Derby database is there: sluice cannot tell
// whether it holds events, and starting would strand them without a word.
func (c *jdbcChannel) Start(ctx context.Context) error {
	if st, err := os.Stat(c.derby); err == nil && st.IsDir() {
		return fmt.Errorf("jdbc channel: %s is a Flume JDBC channel's Derby database, which sluice does not read; starting would strand any events it holds: "+
			"drain the channel with Flume first (stop its sources and let its sinks empty it), then move %s away", c.derby, c.derby)
	}
	return c.Channel.Start(ctx)
}
