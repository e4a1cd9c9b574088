// Package avrorpc speaks Flume's Avro RPC (AvroSourceProtocol over Avro IPC
// on Netty framing), byte-compatible with Flume's Avro source, Avro sink and
// RPC clients, as described in flume-reference §1:
//
//   - framing: pack = serial, frame count, length-prefixed frames (frame.go);
//   - the Avro IPC handshake, stateful per connection as Flume's Netty
//     transport is: only requests before a successful handshake carry one
//     (handshake.go, server.go, client.go);
//   - append and appendBatch of AvroFlumeEvent {map<string> headers; bytes
//     body}, replied with the Status enum OK, FAILED or UNKNOWN (wire.go);
//   - optional deflate (zlib) over the whole stream both ways (conn.go).
//
// Server serves connections a source accepted; Client is what the Avro sink
// and the load generator send with. Every length read from the wire (frame
// count and size, array and map block counts, string and bytes lengths) is
// checked against Limits and against the bytes actually received before
// anything is allocated, so a hostile peer cannot make the agent allocate
// more than about three times Limits.MaxMessageBytes per connection.
//
// The wire codec is written by hand over byte slices rather than with
// hamba/avro's Reader, which cannot report how many bytes remain and so
// cannot bound a block count before allocating; hamba/avro parses and checks
// the protocol texts peers exchange in the handshake, and the tests use its
// schema codec as an independent oracle for the event encoding.
package avrorpc
