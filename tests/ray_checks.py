"""What a running private Ray looks like from outside: its listening sockets, read from the process
table, and what a client without its token gets when it tries Ray's own client code on it."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from tests import process_table
from tests.conftest import MARK, REPO


@dataclass
class RaySnapshot:
    """Every process carrying a test's marker while its Ray ran: its name and listening sockets."""

    sockets: dict[int, tuple[str, list[tuple[str, int]]]]  # pid -> (program, [(address, port)])
    gcs_address: str  # 127.0.0.1:PORT, where the GCS listens
    token_path: Path  # the token file Ray's processes were told to read
    token_stat: os.stat_result  # its lstat at that moment, and its folder's
    token_folder_stat: os.stat_result
    raylet_socket: Path  # where the raylet's Unix socket is (Ray's temp folder)

    def beyond_loopback(self) -> list[str]:
        return [f"{program} (pid {pid}) on {address}:{port}" for pid, (program, sockets) in self.sockets.items()
                for address, port in sockets if not process_table.is_loopback(address)]

    def listening_programs(self) -> set[str]:
        return {program for program, sockets in self.sockets.values() if sockets}


def snapshot(marker: str) -> RaySnapshot:
    """The processes with `marker` (the test's command and all it started, Ray's daemons and workers
    included), at this moment. Ray's GCS must be among them."""
    sockets: dict[int, tuple[str, list[tuple[str, int]]]] = {}
    gcs: tuple[int, int] | None = None
    raylet_socket = Path("?")
    for pid in process_table.marked(MARK, marker):
        program = _program(pid)
        sockets[pid] = (program, process_table.listening_sockets(pid))
        if program == "gcs_server" and sockets[pid][1]:
            gcs = (pid, sockets[pid][1][0][1])
        if program == "raylet":
            flag = b"--raylet_socket_name="
            raylet_socket = Path(next(a[len(flag):] for a in _argv(pid) if a.startswith(flag)).decode())
    assert gcs is not None, f"no listening GCS among {sorted(p for p, _ in sockets.values())}"
    environ = dict(v.split(b"=", 1) for v in Path(f"/proc/{gcs[0]}/environ").read_bytes().split(b"\0") if b"=" in v)
    token = Path(environ[b"RAY_AUTH_TOKEN_PATH"].decode())
    return RaySnapshot(sockets, f"127.0.0.1:{gcs[1]}", token, token.lstat(), token.parent.lstat(), raylet_socket)


def _argv(pid: int) -> list[bytes]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:  # it ended meanwhile
        return [b""]


def _program(pid: int) -> str:
    """Ray names its processes by their title (ray::IDLE, ray::run_trial, ray::RuntimeEnvAgent), its
    daemons by their file (gcs_server, raylet)."""
    argv0 = _argv(pid)[0].decode(errors="replace").strip()
    return argv0 if argv0.startswith("ray::") else Path(argv0.split()[0] if argv0 else "?").name


# Ray's own client code, with no token in its environment nor in its home: the GCS's key-value store
# holds every remote function, pickled (overwriting them made the next trial run the client's code),
# and ray.init + a task is how any Ray program runs code on an instance.
ATTACKER = """
import sys
from pathlib import Path
import ray
from ray._raylet import GcsClient

gcs, ran = sys.argv[1], Path(sys.argv[2])
try:
    client = GcsClient(address=gcs)
    for key in client.internal_kv_keys(b"", namespace=b"fun"):
        client.internal_kv_put(key, b"not the sweep's function", True, namespace=b"fun")
    print("kv: written")
except Exception as e:
    print("kv: refused:", type(e).__name__, e)
try:
    ray.init(address=gcs, log_to_driver=False)
    ray.get(ray.remote(lambda: ran.touch()).remote())
    print("task: ran")
except Exception as e:
    print("task: refused:", type(e).__name__, repr(e.__cause__ or e))
"""


def attack(gcs_address: str, marker: str, home: Path, token: str | None = None) -> tuple[subprocess.CompletedProcess[str], Path]:
    """ATTACKER against `gcs_address`, as another process of this user's without the instance's
    token: no RAY_* variable, an empty home (no ~/.ray/auth_token); or with `token`, a token it
    knows from elsewhere. Returns its result and the file a task of its would have made."""
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    if token is not None:
        env.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=token)
    # Ray's client otherwise turns 127.0.0.1 into the machine's network address, where nothing of
    # the private Ray listens; and it gives up after 2 refusals instead of 20 s of them.
    env.update({"HOME": str(home), MARK: marker, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_NUM_REDIS_GET_RETRIES": "2"})
    ran = home / "ran"
    result = subprocess.run([sys.executable, "-c", ATTACKER, gcs_address, str(ran)], cwd=REPO, env=env,
                            capture_output=True, text=True, timeout=300)
    return result, ran


def check_private(ray: RaySnapshot) -> None:
    """Every socket of the session's processes on loopback (the GCS and raylet among them, so that
    Ray's were seen), its token readable by this user alone, and Ray's own files (made writable by
    every account) in the token's 0700 folder, where no other account reaches them."""
    assert ray.beyond_loopback() == []
    assert {"gcs_server", "raylet"} <= ray.listening_programs(), ray.sockets
    token, folder = ray.token_stat, ray.token_folder_stat
    assert stat.S_ISREG(token.st_mode) and stat.S_IMODE(token.st_mode) == 0o600 and token.st_uid == os.getuid()
    assert stat.S_ISDIR(folder.st_mode) and stat.S_IMODE(folder.st_mode) == 0o700 and folder.st_uid == os.getuid()
    assert ray.raylet_socket.is_relative_to(ray.token_path.parent), ray.raylet_socket


def check_refused(result: subprocess.CompletedProcess[str], ran: Path) -> None:
    """The attacker's key-value writes and its task were refused for want of the token."""
    lines = result.stdout.splitlines()
    assert lines[0].startswith("kv: refused: AuthenticationError") and "InvalidAuthToken" in lines[0], result.stdout + result.stderr[-3000:]
    assert lines[1].startswith("task: refused:") and "AuthenticationError" in lines[1], result.stdout + result.stderr[-3000:]
    assert not ran.exists()
