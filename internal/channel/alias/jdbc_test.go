package aliaschannel

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/metrics"
	"github.com/sluicehq/sluice/internal/testutil"
)

func buildJDBC(t *testing.T, props map[string]string) (flow.Channel, *metrics.Registry, *config.Props) {
	t.Helper()
	return build(t, NewJDBC, "jdbc", props)
}

// The User Guide's JDBC channel (type = jdbc and nothing else, here with
// Derby's home moved by sysprop.user.home): a durable file channel where
// Flume's embedded database would be, its database keys noted as ignored.
func TestJDBCRunsAsFileChannel(t *testing.T) {
	home := t.TempDir()
	props := map[string]string{"sysprop.user.home": home, "maximum.capacity": "500", "minimumRequiredSpace": "0",
		"db.type": "DERBY", "create.schema": "true", "sysprop.derby.system.durability": "test"}
	ch, reg, p := buildJDBC(t, props)
	if err := p.Err(); err != nil {
		t.Fatal(err)
	}
	if _, ok := ch.(*jdbcChannel); !ok {
		t.Fatalf("built %T, want the file channel standing for it", ch)
	}
	if _, ok := ch.(flow.Durable); !ok {
		t.Fatal("the channel does not say it is durable (flow.Durable): a stop would count its events as dropped")
	}
	if got := capacity(reg); got != "500" {
		t.Errorf("ChannelCapacity %s, want maximum.capacity 500", got)
	}
	n := notes(p)
	dir := filepath.Join(home, ".flume", "jdbc-channel")
	for _, want := range []string{"runs as a file channel of 500 events in " + dir, "db.type: ignored", "create.schema: ignored", "sysprop.derby.system.durability: ignored"} {
		if !strings.Contains(n, want) {
			t.Errorf("notes lack %q:\n%s", want, n)
		}
	}
	if err := ch.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := testutil.PutCommit(ch, testutil.Events("e", 20)); err != nil {
		t.Fatal(err)
	}
	if err := ch.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "sluice-data")); err != nil {
		t.Fatalf("no data directory beside where Derby's database would be: %v", err)
	}
	again, _, _ := buildJDBC(t, props)
	if err := again.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer again.Stop(context.Background())
	if got := testutil.TakeAll(t, again, 20, 20, time.Second); len(got) != 20 {
		t.Fatalf("after a restart the channel gave %d of the 20 events", len(got))
	}
}

// driver.url: an embedded Derby path places the channel beside it; any
// other database is refused, naming the key.
func TestJDBCDriverURL(t *testing.T) {
	dir := t.TempDir()
	_, _, p := buildJDBC(t, map[string]string{"driver.url": "jdbc:derby:" + dir + "/flumedb;create=true"})
	if n := notes(p); !strings.Contains(n, "events in "+dir+" (") {
		t.Errorf("notes:\n%s", n)
	}
	for _, u := range []string{"jdbc:mysql://db:3306/flume", "jdbc:derby://db:1527/flume"} {
		_, _, p := buildJDBC(t, map[string]string{"driver.url": u})
		if err := p.Err(); err == nil || !strings.Contains(err.Error(), "driver.url: \""+u+"\" is not an embedded Derby database") {
			t.Errorf("%s: %v, want it refused", u, err)
		}
	}
}

// A Flume Derby database where the channel's would be: Start refuses
// (sluice cannot count its events), naming it and what to do.
func TestJDBCRefusesBesideDerby(t *testing.T) {
	home := t.TempDir()
	derby := filepath.Join(home, ".flume", "jdbc-channel", "db")
	if err := os.MkdirAll(derby, 0o755); err != nil {
		t.Fatal(err)
	}
	ch, _, _ := buildJDBC(t, map[string]string{"sysprop.user.home": home, "minimumRequiredSpace": "0"})
	err := ch.Start(context.Background())
	if err == nil || !strings.Contains(err.Error(), derby+" is a Flume JDBC channel's Derby database") || !strings.Contains(err.Error(), "drain the channel with Flume first") {
		t.Fatalf("Start: %v, want it refused", err)
	}
	if _, err := os.Stat(filepath.Join(home, ".flume", "jdbc-channel", "sluice-data")); err == nil {
		t.Fatal("the file channel's directory was created beside Derby's")
	}
}
