"""Who holds an embedded store: a ``HOLDER`` file next to LevelDB's ``LOCK``.

LevelDB's lock says only that some process holds the store.  The process that takes the lock
writes its pid, host, command line and start time to ``HOLDER``, so that the next one can name it.
The file is advisory: the lock decides, and a HOLDER left by a killed process is overwritten by
the next process that gets the lock.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time

FILE = "HOLDER"


def _command_line() -> str:
    """The command line this process was started with. Not ``sys.argv`` alone: Scrapy takes the
    command's name out of it (``scrapy crawl site`` leaves ``scrapy site``)."""
    if sys.argv[:1] == ["-c"]:
        return " ".join(sys.argv)  # python -c: the code would fill the line
    argv = list(getattr(sys, "orig_argv", None) or sys.argv)
    if len(argv) > 1 and argv[1] == sys.argv[0]:
        argv = argv[1:]  # a script, as the scrapy command is: its path says enough
    return " ".join(argv)


def record_holder(path: str) -> None:
    """Say who holds the store (call once the lock is taken)."""
    holder = {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "command": _command_line()[:300],
        "since": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    try:
        with open(os.path.join(path, FILE), "w", encoding="utf-8") as f:
            json.dump(holder, f)
    except OSError:
        pass  # a read-only or full disk: the lock still protects the store


def release_holder(path: str) -> None:
    """Forget the holder (call before the lock is released), unless another process took over."""
    try:
        with open(os.path.join(path, FILE), encoding="utf-8") as f:
            if json.load(f).get("pid") != os.getpid():
                return
        os.unlink(os.path.join(path, FILE))
    except (OSError, ValueError, AttributeError):
        pass


def held_message(path: str) -> str:
    """Who holds the store at ``path`` and how to find out; for the error of a second opener."""
    lock = os.path.join(path, "LOCK")
    try:
        with open(os.path.join(path, FILE), encoding="utf-8") as f:
            holder = json.load(f)
        who = (
            f"held by pid {holder['pid']} on {holder['host']} since {holder['since']} "
            f"({holder['command']})"
        )
    except (OSError, ValueError, KeyError, TypeError):
        who = "held by another process"
    return f"{who}; `fuser -v {lock}` or `lsof {lock}` shows the process that holds it"
