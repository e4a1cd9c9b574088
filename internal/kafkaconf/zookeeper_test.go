package kafkaconf

import (
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/config"
)

// Flume 1.6's ZooKeeper keys: beside kafka.bootstrap.servers they are notes
// (Flume ignores zookeeperConnect then too); alone, zookeeperConnect is
// refused once, at its own line, with what to set instead.
func TestZooKeeperKeys(t *testing.T) {
	for _, tc := range []struct {
		props map[string]string
		want  []string // substrings of the problems, in file, line and key order
	}{
		{map[string]string{"kafka.bootstrap.servers": "b:9092", "zookeeperConnect": "zk:2181", "migrateZookeeperOffsets": "true"},
			[]string{"migrateZookeeperOffsets: ignored (not needed by sluice)", "zookeeperConnect: ignored (not needed by sluice): Flume reads it only"}},
		{map[string]string{"zookeeperConnect": "zk:2181"},
			[]string{"zookeeperConnect: sluice does not look the brokers up in ZooKeeper; set kafka.bootstrap.servers"}},
		{map[string]string{}, []string{"kafka.bootstrap.servers: missing required property"}},
	} {
		p := config.FromMap("a1.sources.r1.", tc.props)
		Brokers(p, "")
		ReadZooKeeperKeys(p)
		p.Unused()
		got := p.Problems().Sorted()
		if len(got) != len(tc.want) {
			t.Errorf("%v: problems %v, want %d", tc.props, got, len(tc.want))
			continue
		}
		for i, w := range tc.want {
			if !strings.Contains(got[i].String(), w) {
				t.Errorf("%v: problem %d = %q, want %q", tc.props, i, got[i].String(), w)
			}
		}
	}
}
