//go:build !kfake

package bench

import "errors"

// errNoKfake is what --kafka-brokers kfake gets from the agent's own
// binary: franz-go's fake broker is a test tool, about 3 MB of it, that
// the agent never runs, so only a bench build carries it.
var errNoKfake = errors.New(`bench: this sluice binary has no in-process Kafka ("kfake" is built only with -tags kfake): ` +
	`build one with  go build -tags kfake -o sluice-bench ./cmd/sluice  and run the bench with it, ` +
	`or give --kafka-brokers HOST:PORT of a Kafka cluster`)

func startFakeKafka(string) (string, func(), error) { return "", nil, errNoKfake }
