package alias

import (
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
const DefaultJDBCCapacity = file.DefaultCapacity

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
// to this host's disk is a change the user must choose. Events a Flume agent
// left in its Derby database are not read.
func NewJDBC(env flow.Env, p *config.Props) (flow.Channel, error) {
	home, _ := os.UserHomeDir()
	if h := p.String("sysprop.user.home", ""); h != "" {
		home = h
	}
	dir := filepath.Join(home, ".flume", "jdbc-channel")
	if u := strings.TrimSpace(p.String("driver.url", "")); u != "" {
		path, ok := strings.CutPrefix(u, "jdbc:derby:")
		path, _, _ = strings.Cut(path, ";")
		if !ok || strings.HasPrefix(path, "//") || path == "" {
			p.Errorf("driver.url", "%q is not an embedded Derby database: sluice runs a JDBC channel as its file channel on this host's disk, and will not move events from a shared database here unasked; use type = file (or kafka, to share the channel)", u)
			return file.New(env, p)
		}
		// The database's directory holds the file channel's directories.
		dir = filepath.Dir(filepath.Clean(path))
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
	p.Set("capacity", strconv.Itoa(capacity), "maximum.capacity")
	if !p.Has("transactionCapacity") && capacity < file.DefaultTransactionCapacity {
		p.Set("transactionCapacity", strconv.Itoa(capacity), "maximum.capacity")
	}
	p.Set("checkpointDir", filepath.Join(dir, "sluice-checkpoint"), "driver.url")
	p.Set("dataDirs", filepath.Join(dir, "sluice-data"), "driver.url")
	p.Notef("type", "runs as a file channel of %d events in %s (sluice-checkpoint, sluice-data): on local disk and durable, as Flume's embedded Derby database; events a Flume agent left in that database are not read",
		capacity, dir)
	return file.New(env, p)
}
