"""The end of a local Ray cluster that ``--ray auto`` started, even when sweeper is killed.

Ray ties the processes ``ray.init()`` starts to the driver (the kernel kills its direct children
with it), but the per-node agents are the raylet's children: they see it gone at once, then wait
about a minute on the dead GCS before they exit. So the driver starts this small process, in a
session of its own, with the cluster's processes (pid and start time, so that a reused pid is
never touched): when the driver is gone, it kills those still there; when they are all gone (the
cluster stopped in order), it exits. Linux only (``/proc``); elsewhere Ray's own minute stands.

``python -m sweeper.record.ray_reaper DRIVER_PID PID:START ...``
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time

POLL_S = 0.2


def start_time(pid: int) -> int | None:
    """The process's start time (clock ticks since boot, /proc/<pid>/stat field 22), or None
    if there is no such process (or it is a zombie)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
            stat = fh.read()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()
    if fields[0] == "Z":
        return None
    return int(fields[19])


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` now (children, theirs, ...)."""
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", encoding="ascii") as fh:
                stat = fh.read()
        except OSError:
            continue
        parent = int(stat[stat.rindex(")") + 2 :].split()[1])
        children.setdefault(parent, []).append(int(name))
    out: list[int] = []
    stack = [pid]
    while stack:
        for child in children.get(stack.pop(), []):
            out.append(child)
            stack.append(child)
    return out


def main(argv: list[str]) -> int:
    driver = int(argv[0])
    driver_start = start_time(driver)
    watched: list[tuple[int, int]] = []
    for item in argv[1:]:
        pid_text, _, start_text = item.partition(":")
        watched.append((int(pid_text), int(start_text)))
    while True:
        alive = [(pid, start) for pid, start in watched if start_time(pid) == start]
        if not alive:
            return 0
        if driver_start is None or start_time(driver) != driver_start:
            for pid, start in alive:
                if start_time(pid) == start:
                    with contextlib.suppress(OSError):
                        os.kill(pid, signal.SIGKILL)
            return 0
        time.sleep(POLL_S)


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the driver's Ctrl-C is the driver's
    sys.exit(main(sys.argv[1:]))
