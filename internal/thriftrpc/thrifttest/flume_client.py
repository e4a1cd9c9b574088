"""A Flume Thrift RPC client on Apache Thrift's Python library (Debian's
python3-thrift), with code generated from sluice's flume.thrift by Debian's
thrift-compiler: an implementation independent of sluice's.

Usage: flume_client.py GEN_DIR HOST PORT compact|binary [CA_FILE]

Reads calls from stdin, one JSON object a line:
  {"call": "append" | "appendBatch",
   "events": [{"headers": {"k": "v"}, "body": "<base64>"}]}
and prints the Status name of each reply, one a line.
"""
import base64
import json
import ssl
import sys

sys.path.insert(0, sys.argv[1])

from flume import ThriftSourceProtocol  # noqa: E402
from flume.ttypes import Status, ThriftFlumeEvent  # noqa: E402
from thrift.protocol import TBinaryProtocol, TCompactProtocol  # noqa: E402
from thrift.transport import TSocket, TSSLSocket, TTransport  # noqa: E402


def main():
    host, port, proto = sys.argv[2], int(sys.argv[3]), sys.argv[4]
    if len(sys.argv) > 5:
        ctx = ssl.create_default_context(cafile=sys.argv[5])
        sock = TSSLSocket.TSSLSocket(host, port, ssl_context=ctx, server_hostname="localhost")
    else:
        sock = TSocket.TSocket(host, port)
    transport = TTransport.TFramedTransport(sock)
    if proto == "binary":
        protocol = TBinaryProtocol.TBinaryProtocol(transport)
    else:
        protocol = TCompactProtocol.TCompactProtocol(transport)
    client = ThriftSourceProtocol.Client(protocol)
    transport.open()
    for line in sys.stdin:
        call = json.loads(line)
        events = [ThriftFlumeEvent(headers=e["headers"], body=base64.b64decode(e["body"]))
                  for e in call["events"]]
        if call["call"] == "append":
            status = client.append(events[0])
        else:
            status = client.appendBatch(events)
        print(Status._VALUES_TO_NAMES[status], flush=True)
    transport.close()


main()
