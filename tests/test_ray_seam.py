"""Ray's private names are read and changed in one module, ray_setup/ray_internals.py: read from the
source, so a private name of Ray used anywhere else fails here; and a Ray that lacks one of them is
refused in one line before anything starts."""

from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
from pathlib import Path

import pytest

from ray_setup.installed import ray_installed
from tests import forked_run
from tests.conftest import REPO, Cli
from tests.test_architecture import ALLOWED
from tests.test_labml_app_seam import is_private, names_along

RAY_SEAM = REPO / "ray_setup" / "ray_internals.py"
PRODUCT = sorted({p for package in [*ALLOWED, "tools"] for p in (REPO / package).rglob("*.py")})


def ray_private_names(path: Path) -> list[tuple[int, str]]:
    """(line, name) for each private name of Ray that `path` uses: a private module of Ray imported
    (`ray._private…`, `from ray import _raylet`), a private name imported from Ray, a string naming
    one (`importlib.import_module("ray._raylet")`, a logger's name), and a private attribute read or
    set on anything reached from a name bound to Ray (an imported Ray name, or our `ray`/`_ray`)."""
    tree = ast.parse(path.read_text(), str(path))
    bound = {"ray", "_ray"}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "ray":
                    bound.add((alias.asname or alias.name).split(".")[0])
                    found += [(node.lineno, alias.name)] if any(map(is_private, alias.name.split("."))) else []
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == "ray":
            bound |= {alias.asname or alias.name for alias in node.names}
            if any(map(is_private, (node.module or "").split("."))):
                found.append((node.lineno, node.module or ""))
            found += [(node.lineno, f"{node.module}.{a.name}") for a in node.names if is_private(a.name)]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and re.match(r"ray(\.\w+)*\._", node.value):
            found.append((node.lineno, node.value))
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            names = names_along(node)
            if names[-1] != node.attr:
                continue
            if is_private(node.attr) and any(name in bound for name in names[:-1]):
                found.append((node.lineno, node.attr))
    return sorted(set(found))


def test_rays_private_names_are_used_in_one_module_only() -> None:
    offenders = [f"{path.relative_to(REPO)}:{line} {what}" for path in PRODUCT if path != RAY_SEAM
                 for line, what in ray_private_names(path)]
    assert offenders == []


def test_the_seam_names_every_private_name_it_uses_in_its_upgrade_checklist() -> None:
    used = ray_private_names(RAY_SEAM)
    assert len(used) >= 8  # the check sees the names it looks for
    doc = ast.get_docstring(ast.parse(RAY_SEAM.read_text())) or ""
    assert [what for _, what in used if what.rsplit(".", 1)[-1] not in doc] == []


def test_every_kind_of_private_use_is_seen(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text(
        "import importlib\nimport ray._private.worker\nfrom ray import _raylet\nfrom ray._private import node\n"
        "from ray.util import _hidden\nimport ray as r\n\n"
        "def f(self, handle):\n"
        "    importlib.import_module('ray._raylet')\n"   # a module named in a string
        "    r._private.worker.x = 1\n"                  # through an alias
        "    self._ray._global_node\n"                   # through our attribute holding Ray
        "    handle._actor_id\n"                         # not reached from Ray: ours to name
        "    self._lost = r.get(1)\n"                    # ours
    )
    assert ray_private_names(module) == [
        (2, "ray._private.worker"), (3, "ray._raylet"), (4, "ray._private"), (5, "ray.util._hidden"), (9, "ray._raylet"),
        (10, "_private"), (11, "_global_node")]


requires_ray = pytest.mark.skipif(not ray_installed(), reason='Ray is not installed (pip install -e ".[ray]")')
# A Ray that moved one of the names the seam uses: each command that uses Ray refuses in one line,
# exit 2, before anything starts.
WITHOUT_PRINTER = """
import sys
from ray._private import worker
del worker.print_to_stdstream
sys.argv = sys.argv[1:]
import runpy
runpy.run_module(sys.argv[0], run_name="__main__", alter_sys=True)
"""


@requires_ray
@pytest.mark.parametrize("command", [["experiments.breakout", "--backend", "ray", "--updates", "1"],
                                     ["experiments.sweep", "--grid", "learning_rate=1e-4", "--updates", "1"],
                                     ["experiments.pbt", "--population", "2", "--interval", "1", "--updates", "2"]])
def test_a_ray_without_a_name_the_seam_uses_is_refused_in_one_line_before_anything_starts(
        cli: Cli, tmp_path: Path, command: list[str]) -> None:
    runs = tmp_path / "runs"
    result = forked_run.run([sys.executable, "-c", WITHOUT_PRINTER, *command, "--data-dir", str(runs)], cwd=REPO,
                            env=cli.env(), text=True, timeout=300)
    version = importlib.metadata.version("ray")  # not `import ray` here: a private Ray started later in this process must import it
    assert (result.returncode, result.stdout) == (2, ""), result.stderr[-2000:]
    assert result.stderr == (f"error: Ray {version}: expected a Ray with ray._private.worker.print_to_stdstream "
                             "(ray_setup/ray_internals.py lists what this project uses of Ray's internals; Ray 2.60 has them all)\n")
    assert not runs.exists()
