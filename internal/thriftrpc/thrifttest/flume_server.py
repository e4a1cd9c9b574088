"""A Flume Thrift RPC server on Apache Thrift's Python library (Debian's
python3-thrift), with code generated from sluice's flume.thrift by Debian's
thrift-compiler: an implementation independent of sluice's, standing in for
a Flume thrift source.

Usage: flume_server.py GEN_DIR PORT compact|binary FAIL_FIRST [CERT KEY]

Replies FAILED to the first FAIL_FIRST calls, OK to the rest, and prints
each event of an OK call as one JSON line:
  {"call": "appendBatch", "headers": {...}, "body": "<base64>"}
Prints "listening" once it serves; exits when stdin closes.
"""
import base64
import json
import os
import ssl
import sys
import threading

sys.path.insert(0, sys.argv[1])

from flume import ThriftSourceProtocol  # noqa: E402
from flume.ttypes import Status  # noqa: E402
from thrift.protocol import TBinaryProtocol, TCompactProtocol  # noqa: E402
from thrift.server import TServer  # noqa: E402
from thrift.transport import TSocket, TSSLSocket, TTransport  # noqa: E402

lock = threading.Lock()


class Handler:
    def __init__(self, fail_first):
        self.fail_left = fail_first

    def _take(self, call, events):
        with lock:
            if self.fail_left > 0:
                self.fail_left -= 1
                return Status.FAILED
            for e in events:
                print(json.dumps({"call": call, "headers": e.headers,
                                  "body": base64.b64encode(e.body).decode()}))
            sys.stdout.flush()
            return Status.OK

    def append(self, event):
        return self._take("append", [event])

    def appendBatch(self, events):
        return self._take("appendBatch", events)


def main():
    port, proto, fail_first = int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
    if len(sys.argv) > 6:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(sys.argv[5], sys.argv[6])
        transport = TSSLSocket.TSSLServerSocket("127.0.0.1", port, ssl_context=ctx)
    else:
        transport = TSocket.TServerSocket("127.0.0.1", port)
    if proto == "binary":
        pfactory = TBinaryProtocol.TBinaryProtocolFactory()
    else:
        pfactory = TCompactProtocol.TCompactProtocolFactory()
    processor = ThriftSourceProtocol.Processor(Handler(fail_first))
    server = TServer.TThreadedServer(processor, transport, TTransport.TFramedTransportFactory(), pfactory,
                                     daemon=True)
    transport.listen()
    transport.listen = lambda: None  # already listening; serve() would bind again
    threading.Thread(target=server.serve, daemon=True).start()
    print("listening", flush=True)
    sys.stdin.read()
    sys.stdout.flush()
    os._exit(0)


main()
