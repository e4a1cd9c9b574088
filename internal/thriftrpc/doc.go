// Package thriftrpc is Flume's Thrift RPC, shared by the thrift source and
// sink: the ThriftSourceProtocol service (append and appendBatch of
// ThriftFlumeEvent, replying a Status) over Thrift's framed transport with
// the compact (Flume's default) or the binary protocol, optionally in TLS.
//
// The protocol is stated in flume.thrift; package flume is generated from it
// by the Apache Thrift compiler (see gen.go) and runs on the Apache Thrift Go
// library, which encodes and decodes every message. This package adds what a
// server facing the network needs around it: frames bounded in size and in
// how long they may take to arrive, a bound on the events of one call, and
// errors that say what a misconfigured peer did wrong (the other protocol,
// no framing).
package thriftrpc
