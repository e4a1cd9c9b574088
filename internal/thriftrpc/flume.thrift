// Flume's Thrift RPC (ThriftSourceProtocol), stated here from the protocol's
// definition: what a Flume thrift source serves and a Flume thrift sink or
// RPC client calls. Only names, field ids and types matter on the wire; they
// match Flume's, so sluice talks to Flume's thrift sinks and sources and to
// any client generated from Flume's own IDL.
//
// The Go package ./flume is generated from this file, and the tests generate
// Python from it; see gen.go for the command.

namespace go flume
namespace py flume
namespace java org.apache.flume.thrift

// An event: string headers and an opaque body.
struct ThriftFlumeEvent {
  1: required map<string, string> headers
  2: required binary body
}

// The reply to a call. OK: every event was committed to the source's
// channels. FAILED: the channels refused them (full); send again later.
// ERROR and UNKNOWN: anything else; the events were not taken either.
enum Status {
  OK = 0
  FAILED = 1
  ERROR = 2
  UNKNOWN = 3
}

service ThriftSourceProtocol {
  // One event.
  Status append(1: ThriftFlumeEvent event)
  // Several events, taken or refused together.
  Status appendBatch(1: list<ThriftFlumeEvent> events)
}
