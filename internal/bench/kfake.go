//go:build kfake

package bench

import (
	"fmt"
	"strings"

	"github.com/twmb/franz-go/pkg/kfake"
)

func startFakeKafka(topic string) (brokers string, stop func(), err error) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, topic))
	if err != nil {
		return "", nil, fmt.Errorf("bench: start the in-process Kafka: %w", err)
	}
	return strings.Join(c.ListenAddrs(), ","), c.Close, nil
}
