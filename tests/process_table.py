"""The process table, through psutil, for the tests and tests/chaos.py: a run's processes found by an
environment marker they all inherit (even orphans, once re-parented to init), parent/child links,
and the TCP ports a process listens on."""

from __future__ import annotations

import ipaddress
import os
import time

import psutil


def is_alive(pid: int) -> bool:
    """Running or sleeping; a zombie has already exited (it only waits to be reaped)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def marked(key: str, value: str) -> list[int]:
    """Live processes whose environment holds `key=value` (this process excluded)."""
    found = []
    for process in psutil.process_iter():
        try:
            if process.pid != os.getpid() and process.environ().get(key) == value and is_alive(process.pid):
                found.append(process.pid)
        except psutil.Error:  # gone, or not ours to read
            continue
    return found


def children(pid: int, recursive: bool = False) -> list[int]:
    try:
        return [child.pid for child in psutil.Process(pid).children(recursive=recursive)]
    except psutil.Error:
        return []


def descendants(pid: int) -> list[int]:
    """Every process below `pid` (zombies included: they were not reaped)."""
    return children(pid, recursive=True)


def age_s(pid: int) -> float:
    """Seconds since `pid` started (0 if it is gone)."""
    try:  # since boot, as the kernel counts a start: create_time() adds a boot time kept in whole seconds
        started = psutil.Process(pid).create_time() - psutil.boot_time()
    except psutil.Error:
        return 0.0
    return max(0.0, time.clock_gettime(time.CLOCK_BOOTTIME) - started)


def listening_sockets(pid: int) -> list[tuple[str, int]]:
    """(address, port) of every TCP socket `pid` listens on, IPv4 and IPv6. An IPv4 address on an
    IPv6 socket is IPv4-mapped (::ffff:…)."""
    try:
        sockets = psutil.Process(pid).net_connections(kind="tcp")
    except psutil.Error:  # gone, or not ours to read
        return []
    return [(s.laddr.ip, s.laddr.port) for s in sockets if s.status == psutil.CONN_LISTEN]


def is_loopback(address: str) -> bool:
    """127.0.0.0/8, ::1, or an IPv4 loopback address on an IPv6 socket (::ffff:127.0.0.1)."""
    ip = ipaddress.ip_address(address)
    mapped = ip.ipv4_mapped if isinstance(ip, ipaddress.IPv6Address) else None
    return ip.is_loopback or (mapped is not None and mapped.is_loopback)
