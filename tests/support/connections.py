"""What this test process is connected to: a client that reaches a broker around Herald shows
here."""

from __future__ import annotations

import os


def remote_ports_of_this_process(pid: int | str = "self") -> set[int]:
    """Remote TCP ports of this process's (or `pid`'s) established connections (Linux /proc)."""
    inodes = set()
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:  # it has ended
        return set()
    for fd in fds:
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    ports = set()
    for table in (f"/proc/{pid}/net/tcp", f"/proc/{pid}/net/tcp6"):
        try:
            with open(table) as f:
                lines = f.readlines()[1:]
        except OSError:
            continue
        for line in lines:
            cols = line.split()
            if cols[9] in inodes and cols[3] == "01":  # ESTABLISHED
                ports.add(int(cols[2].rsplit(":", 1)[1], 16))
    return ports
