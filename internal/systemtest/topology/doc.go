// Package topology holds no code: its tests run several real agents in one
// process, wired as a tiered Flume deployment (edge agents hopping over
// Avro RPC to collectors), and check what the tiers promise together that
// no single component's tests can show.
package topology
