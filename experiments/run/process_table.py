"""Reading the process table (Linux /proc), for the chaos script, the benchmark and the tests:
finding a run's processes by an environment marker they all inherit — even orphans, once they
were re-parented to init — walking parent/child links, and the TCP ports a process listens on."""

from __future__ import annotations

import ipaddress
import os
from pathlib import Path

_PROC = Path("/proc")


def _pids() -> list[int]:
    return [int(entry.name) for entry in _PROC.iterdir() if entry.name.isdigit()]


def is_alive(pid: int) -> bool:
    """Running or sleeping; a zombie has already exited (it only waits to be reaped)."""
    try:
        return "\nState:\tZ" not in (_PROC / str(pid) / "status").read_text()
    except OSError:
        return False


def marked(key: str, value: str) -> list[int]:
    """Live processes whose environment holds `key=value` (this process excluded)."""
    needle = f"{key}={value}".encode()
    found = []
    for pid in _pids():
        if pid == os.getpid():
            continue
        try:
            environ = (_PROC / str(pid) / "environ").read_bytes()
        except OSError:  # gone, or not ours to read
            continue
        if needle in environ.split(b"\0") and is_alive(pid):
            found.append(pid)
    return found


def parent_pid(pid: int) -> int | None:
    try:
        # The command name (field 2) may hold spaces and parentheses: split after the last ")".
        return int((_PROC / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def children(pid: int) -> list[int]:
    return [child for child in _pids() if parent_pid(child) == pid]


def descendants(pid: int) -> list[int]:
    """Every process below `pid` (zombies included: they were not reaped)."""
    parents = {child: parent_pid(child) for child in _pids()}
    found: list[int] = []
    todo = [pid]
    while todo:
        parent = todo.pop()
        for child, its_parent in parents.items():
            if its_parent == parent:
                found.append(child)
                todo.append(child)
    return found


def scheduler_ns(pid: int) -> tuple[int, int] | None:
    """(time on a core, time runnable but waiting for one) of `pid` in ns, summed over its threads
    (/proc/PID/task/*/schedstat, the scheduler's own accounts); None where the kernel keeps no
    such account or the process is gone. A thread that ended before the call is not counted.
    (Read here, not through psutil, which reports CPU times but not the time spent waiting.)"""
    on_core = waiting = read = 0
    try:
        threads = list((_PROC / str(pid) / "task").iterdir())
    except OSError:
        return None
    for thread in threads:
        try:
            fields = (thread / "schedstat").read_text().split()
            on_core, waiting, read = on_core + int(fields[0]), waiting + int(fields[1]), read + 1
        except (OSError, ValueError, IndexError):  # a thread that ended meanwhile, or no schedstat
            continue
    return (on_core, waiting) if read and is_alive(pid) else None


def age_s(pid: int) -> float:
    """Seconds since `pid` started (0 if it is gone)."""
    try:
        start_ticks = int((_PROC / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[19])
        uptime = float((_PROC / "uptime").read_text().split()[0])
    except (OSError, IndexError, ValueError):
        return 0.0
    return uptime - start_ticks / os.sysconf("SC_CLK_TCK")


def listening_sockets(pid: int) -> list[tuple[str, int]]:
    """(address, port) of every TCP socket `pid` listens on, IPv4 and IPv6, as the kernel holds them
    (/proc/net/tcp{,6}, in this process's network namespace: entries matched by inode to the sockets
    among /proc/PID/fd). An IPv4 address on an IPv6 socket is IPv4-mapped (::ffff:…)."""
    inodes = set()
    try:
        for fd in (_PROC / str(pid) / "fd").iterdir():
            try:
                target = os.readlink(fd)
            except OSError:  # closed meanwhile
                continue
            if target.startswith("socket:["):
                inodes.add(int(target[8:-1]))
    except OSError:  # gone, or not ours to read
        return []
    found = []
    for table in ("tcp", "tcp6"):
        for line in (_PROC / "net" / table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] != "0A" or int(fields[9]) not in inodes:  # 0A: TCP_LISTEN
                continue
            address, port = fields[1].split(":")
            raw = bytes.fromhex(address)  # the kernel's words, each in host (little-endian) order
            found.append((str(ipaddress.ip_address(b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4)))), int(port, 16)))
    return found


def is_loopback(address: str) -> bool:
    """127.0.0.0/8, ::1, or an IPv4 loopback address on an IPv6 socket (::ffff:127.0.0.1)."""
    ip = ipaddress.ip_address(address)
    mapped = ip.ipv4_mapped if isinstance(ip, ipaddress.IPv6Address) else None
    return ip.is_loopback or (mapped is not None and mapped.is_loopback)
