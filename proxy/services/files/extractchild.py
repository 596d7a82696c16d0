"""The child process that reads documents for services/files/extraction.py: one at a time, from
its stdin, answering on its stdout. Run as `python -m proxy.services.files.extractchild
MEMORY_BYTES`; it imports no more of the proxy than core/documents.py.

Each ask is a JSON line (`size`, `filename`, `media_type`, `chars`, `cpu`, the PdfLimits) then
`size` bytes; each answer a JSON line (`ok`, then `size` and that many bytes of UTF-8 text, or
`code` and `message`). Before each document the process lowers its own CPU limit to what it
has used plus `cpu` seconds: past it the kernel ends it (SIGXCPU), whatever pypdf is doing, and
the parent sees the pipe close. Its address space is bounded by MEMORY_BYTES: a document that
would take more fails (MemoryError, or the process ends), it never grows the pod past that.
The parent's death closes stdin: the child then exits.
"""

from __future__ import annotations

import json
import math
import resource
import sys
from typing import Any, BinaryIO

from proxy.core.documents import INVALID, PdfLimits, Unreadable, extract_text


def serve(stdin: BinaryIO, stdout: BinaryIO) -> None:
    while True:
        line = stdin.readline()
        if not line:
            return
        ask = json.loads(line)
        data = stdin.read(int(ask["size"]))
        if len(data) < int(ask["size"]):
            return
        _cap_cpu(float(ask["cpu"]))
        limits = PdfLimits(pages=int(ask["pages"]), content_bytes=int(ask["content_bytes"]),
                           operators=int(ask["operators"]), chars=ask["chars"])
        head: dict[str, Any]
        try:
            text = extract_text(data, ask["filename"], ask["media_type"], limits).encode()
            head = {"ok": True, "size": len(text)}
        except Unreadable as exc:
            text, head = b"", {"ok": False, "code": exc.code, "message": exc.message}
        except MemoryError:
            text, head = b"", {"ok": False, "code": INVALID,
                               "message": "the file takes more memory to read than this "
                                          "server gives one document"}
        del data
        stdout.write(json.dumps(head).encode() + b"\n" + text)
        stdout.flush()


def _cap_cpu(seconds: float) -> None:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    soft = math.ceil(usage.ru_utime + usage.ru_stime + seconds)
    _, hard = resource.getrlimit(resource.RLIMIT_CPU)
    if hard != resource.RLIM_INFINITY:
        soft = min(soft, hard)
    resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))


def main() -> None:
    memory = int(sys.argv[1])
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    serve(sys.stdin.buffer, sys.stdout.buffer)


if __name__ == "__main__":
    main()
