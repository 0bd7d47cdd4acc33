"""Watches a worker while its cluster forms, from a process of its own (run as a script,
not imported): TensorFlow's ``MultiWorkerMirroredStrategy`` waits for every worker without
end, holding the worker's interpreter lock, so no thread of the worker can speak meanwhile.

Usage: ``python cluster_watch.py SECONDS NAME=HOST:PORT ...``, with the worker holding the
write end of this process's standard input. It says which workers do not accept a
connection yet, after SECONDS and every minute. A byte on standard input means the cluster
formed: it exits without a word. End of input without one means the worker ended while it
waited (Ctrl-C, a SIGTERM): it says so, as one sentence, and exits.
"""

from __future__ import annotations

import select
import socket
import sys
import time


def _accepts(address: str) -> bool:
    host, _, port = address.rpartition(":")
    try:
        socket.create_connection((host.strip("[]"), int(port)), 1.0).close()
    except (OSError, ValueError):
        return False
    return True


def _missing(others: list[tuple[str, str]]) -> str:
    down = [f"{name} at {address}" for name, address in others if not _accepts(address)]
    return ", ".join(down) or "none of them now"


def main(argv: list[str]) -> None:
    seconds, others = float(argv[0]), [tuple(a.split("=", 1)) for a in argv[1:]]
    note = time.monotonic() + seconds
    while True:
        if select.select([sys.stdin], [], [], max(0.0, note - time.monotonic()))[0]:
            if not sys.stdin.buffer.read(1):  # the worker ended while it waited
                sys.stderr.write(
                    "Stopped while waiting for the cluster's workers to join (not answering: "
                    f"{_missing(others)}); nothing was trained or saved.\n"
                )
            return
        note += 60.0
        sys.stderr.write(
            f"Waiting for the cluster's workers to join; not answering yet: {_missing(others)}. "
            "Start every worker TF_CONFIG lists, each with its own task index.\n"
        )
        sys.stderr.flush()


if __name__ == "__main__":
    main(sys.argv[1:])
