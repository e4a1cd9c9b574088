// An Avro RPC server built on avsc (npm), an implementation independent of
// sluice's and Java's, serving Flume's AvroSourceProtocol over Netty
// framing, as a Flume avro source does. avsc answers a handshake it cannot
// match with NONE followed by an error response; Java's Requestor (and
// sluice's avro sink) must resend with its protocol text.
//
// Usage: node avsc_server.js PORT_FILE
// Prints one JSON line per received event on stdout:
//   {"call":"appendBatch","headers":{...},"body":"<base64>"}
// and writes the port it listens on to PORT_FILE once it listens.
'use strict';

const avro = require('avsc');
const fs = require('fs');
const net = require('net');

// Flume's protocol, stated without its doc comment, so its MD5 differs from
// the one a Flume client announces: the first handshake cannot match.
const protocol = {
  protocol: 'AvroSourceProtocol',
  namespace: 'org.apache.flume.source.avro',
  types: [
    {type: 'enum', name: 'Status', symbols: ['OK', 'FAILED', 'UNKNOWN']},
    {type: 'record', name: 'AvroFlumeEvent', fields: [
      {name: 'headers', type: {type: 'map', values: 'string'}},
      {name: 'body', type: 'bytes'},
    ]},
  ],
  messages: {
    append: {request: [{name: 'event', type: 'AvroFlumeEvent'}], response: 'Status'},
    appendBatch: {request: [{name: 'events', type: {type: 'array', items: 'AvroFlumeEvent'}}], response: 'Status'},
  },
};

function print(call, e) {
  process.stdout.write(JSON.stringify({call, headers: e.headers, body: e.body.toString('base64')}) + '\n');
}

const service = avro.Service.forProtocol(protocol);
// A handler receives the request record: {event} or {events}.
const server = service.createServer()
  .onMessage('append', (req, cb) => { print('append', req.event); cb(null, 'OK'); })
  .onMessage('appendBatch', (req, cb) => { req.events.forEach((e) => print('appendBatch', e)); cb(null, 'OK'); });

const tcp = net.createServer((socket) => {
  socket.on('error', () => {});
  server.createChannel(socket);
});
tcp.listen(0, '127.0.0.1', () => {
  fs.writeFileSync(process.argv[2], String(tcp.address().port));
});
// The test closes stdin to stop the server.
process.stdin.on('end', () => process.exit(0));
process.stdin.resume();
