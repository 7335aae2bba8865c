"""moto's S3 server for the tests, one request at a time per object.

Real S3 applies each request atomically. moto's in-memory backend does not
under its threaded server: a CompleteMultipartUpload that iterates an
upload's parts while another client's UploadPart adds one fails with
"dictionary changed size during iteration", and it leaves a part's buffer
closed, so every later completion of that upload fails too ("seek of closed
file", a 500). tests/object_store.rs provokes exactly that race on purpose
(a woken writer uploading a part while its successor completes the file).
So requests on the same object run one at a time, under a lock per path,
as S3 would order them. Requests on different objects still run side by
side: a writer stopped with SIGSTOP in the middle of a request holds up
only its own object. (tests/object_store.rs took 139 s with these locks
and 131 s without, on one machine.)

    python3 scripts/s3_server.py HOST PORT
"""

import os
import sys
import threading

from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app
from werkzeug.serving import run_simple


def one_at_a_time_per_object(app):
    guard = threading.Lock()
    locks = {}

    def call(environ, start_response):
        path = environ.get("PATH_INFO", "")
        with guard:
            lock = locks.setdefault(path, threading.Lock())
        with lock:
            # moto answers with whole bodies: the list is built under the lock.
            return list(app(environ, start_response))

    return call


def main():
    host, port = sys.argv[1], int(sys.argv[2])
    os.environ.setdefault("MOTO_PORT", str(port))
    app = DomainDispatcherApplication(create_backend_app)
    app.debug = True
    run_simple(host, port, one_at_a_time_per_object(app), threaded=True)


if __name__ == "__main__":
    main()
