"""labml-app is changed, and its private names (and labml_db's) used, in one module of the dashboard:
read from the source, so a change or a private name used anywhere else fails here."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tests.test_architecture import ALLOWED, OURS, REPO, imported_packages

# The server side's one seam: every change made to labml-app (a replaced function, attribute, route,
# middleware, store driver or setting) is in this module, so an upgrade of labml-app means
# re-checking it and experiments/run/labml/. Reading labml-app and writing records through its models is not a change.
LABML_APP_SEAM = REPO / "dashboard" / "labml_app_patches.py"
STOCK_PACKAGES = {"labml_app", "labml_db", "git"}  # labml-app, its store's registries, the repository it reads at import
APP_PARTS = {"routes", "user_middleware", "middleware_stack", "exception_handlers", "app"}  # the stock app's make-up
APP_CHANGES = {"add_middleware", "add_exception_handler", "add_route", "add_api_route", "add_websocket_route",
               "include_router", "mount", "add_event_handler", "setattr", "delattr"}


def names_along(node: ast.expr) -> list[str]:
    """`a.b[c].d["e"]` → ["a", "b", "d", "e"]: the root name, then each attribute and string key."""
    parts = []
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        if isinstance(node, ast.Attribute):
            parts.append(node.attr)
        elif isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, str):
            parts.append(node.slice.value)
        node = node.value
    return [node.id if isinstance(node, ast.Name) else "", *reversed(parts)]


def changes_to_labml_app(path: Path) -> list[tuple[int, str]]:
    """(line, what) for each change `path` makes to labml-app: an assignment or deletion into a
    name imported from STOCK_PACKAGES, or into the make-up of an app (APP_PARTS, on anything but
    `self`); a call of APP_CHANGES, or of a `set…`/`add…` method of an imported stock name; and a
    `LABML_APP_…` setting named."""
    tree = ast.parse(path.read_text(), str(path))
    stock = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            stock |= {(a.asname or a.name).split(".")[0] for a in node.names if a.name.split(".")[0] in STOCK_PACKAGES}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] in STOCK_PACKAGES:
            stock |= {a.asname or a.name for a in node.names}
    found = []
    for node in ast.walk(tree):
        targets = (node.targets if isinstance(node, (ast.Assign, ast.Delete)) else
                   [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else [])
        while any(isinstance(t, (ast.Tuple, ast.List, ast.Starred)) for t in targets):
            targets = [e for t in targets for e in (t.elts if isinstance(t, (ast.Tuple, ast.List)) else
                                                     [t.value] if isinstance(t, ast.Starred) else [t])]
        for target in targets:
            names = names_along(target)
            attributes = {n.attr for n in ast.walk(target) if isinstance(n, ast.Attribute)}
            if len(names) > 1 and (names[0] in stock or (names[0] != "self" and APP_PARTS & attributes)):
                found.append((node.lineno, names[-1]))
        if isinstance(node, ast.Call):
            names = names_along(node.func)
            if names[-1] in APP_CHANGES or (len(names) > 1 and names[0] in stock and names[-1].startswith(("set", "add"))):
                found.append((node.lineno, names[-1]))
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("LABML_APP_"):
            found.append((node.lineno, node.value))
    return sorted(found)


def test_labml_app_is_changed_in_one_module_only() -> None:
    products = sorted(p for package in ALLOWED for p in (REPO / package).rglob("*.py") if p != LABML_APP_SEAM)
    offenders = [f"{path.relative_to(REPO)}:{line} {what}" for path in products for line, what in changes_to_labml_app(path)]
    assert offenders == []


def test_the_labml_app_seam_lists_every_change_it_makes() -> None:
    """Its docstring is the checklist for an upgrade of labml-app: each thing the module changes is named there."""
    changes = changes_to_labml_app(LABML_APP_SEAM)
    assert len(changes) > 10  # the check sees the changes it looks for
    doc = ast.get_docstring(ast.parse(LABML_APP_SEAM.read_text())) or ""
    assert [what for _, what in changes if not re.search(rf"\b{re.escape(what)}\b", doc)] == []


def test_every_kind_of_change_to_labml_app_is_seen(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text(
        "import os\nimport git\nfrom labml_app import db as d\nfrom labml_db import Model\n\n"
        "def f(flask_app, route, self, data):\n"
        "    from labml_app.db import run\n"
        "    d.init_mongo_db = None\n"              # a replaced function
        "    run.Run.get_data, x = None, 1\n"       # in a tuple
        "    del git.Repo\n"
        "    flask_app.app.router.routes[:] = []\n"  # the stock app's routes
        "    route.app = None\n"
        "    flask_app.app.user_middleware[0].kwargs['x'] = 1\n"
        "    flask_app.app.add_middleware(object)\n"
        "    Model.set_db_drivers([])\n"
        "    setattr(run, 'delete', None)\n"
        "    os.environ.setdefault('LABML_APP_SERVER_IP', 'h')\n"
        "    self.app = None\n"                       # ours: not a change
        "    data['routes'] = run.get('x')\n"         # ours, and a read
    )
    assert changes_to_labml_app(module) == [
        (8, "init_mongo_db"), (9, "get_data"), (10, "Repo"), (11, "routes"), (12, "app"), (13, "x"),
        (14, "add_middleware"), (15, "set_db_drivers"), (16, "setattr"), (17, "LABML_APP_SERVER_IP")]


def is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def names_by_origin(tree: ast.Module) -> tuple[set[str], set[str], set[str]]:
    """The module's names imported from STOCK_PACKAGES, from other libraries, and its own (imported
    from ours, defined, assigned, or set on `self`)."""
    stock: set[str] = set()
    elsewhere: set[str] = set()
    own: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            package = (node.module or "").split(".")[0] if isinstance(node, ast.ImportFrom) else None
            for alias in node.names:
                top = package if package is not None else alias.name.split(".")[0]
                name = (alias.asname or alias.name).split(".")[0]
                (stock if top in STOCK_PACKAGES else elsewhere if top not in OURS and getattr(node, "level", 0) == 0 else own).add(name)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            own.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) and names_along(node)[0] in ("self", "cls"):
            own.add(node.attr)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            own.add(node.id)
    return stock, elsewhere, own


def private_names_used(path: Path) -> list[tuple[int, str]]:
    """(line, name) for each private name of someone else's that `path` reads, writes or overrides:
    imported from STOCK_PACKAGES; an attribute off a stock name, or off a parameter or a local
    (labml-app's objects, and the request its handlers read, reach us so) unless the module defines
    that name for itself; a `getattr`-like call naming one; and in a class made from a stock class,
    a method it overrides or an attribute of `self` it did not set. Privates of names imported from
    other libraries (numpy's pickle constructors in safe_pickle) are theirs to keep."""
    tree = ast.parse(path.read_text(), str(path))
    stock, elsewhere, own = names_by_origin(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in STOCK_PACKAGES:
            found += [(node.lineno, a.name) for a in node.names if is_private(a.name)]
        elif isinstance(node, ast.Attribute) and is_private(node.attr):
            root = names_along(node)[0]
            if root in stock or (root not in ("self", "cls") and root not in elsewhere and node.attr not in own):
                found.append((node.lineno, node.attr))
        elif (isinstance(node, ast.Call) and names_along(node.func)[-1] in ("getattr", "setattr", "delattr", "hasattr")
              and len(node.args) > 1 and isinstance(node.args[1], ast.Constant) and is_private(str(node.args[1].value))):
            found.append((node.lineno, str(node.args[1].value)))
        elif isinstance(node, ast.ClassDef) and any(names_along(base)[0] in stock for base in node.bases):
            set_here = {n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store)}
            set_here |= {n.name for n in node.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
            found += [(n.lineno, n.name) for n in node.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and is_private(n.name)]
            found += [(n.lineno, n.attr) for n in ast.walk(node) if isinstance(n, ast.Attribute) and is_private(n.attr)
                      and names_along(n)[0] == "self" and n.attr not in set_here]
    return sorted(set(found))


def test_labml_app_private_names_are_used_in_one_module_only() -> None:
    dashboard = sorted(p for p in (REPO / "dashboard").rglob("*.py") if p != LABML_APP_SEAM)
    offenders = [f"{path.relative_to(REPO)}:{line} {name}" for path in dashboard for line, name in private_names_used(path)]
    assert offenders == []
    # Only the dashboard imports labml-app or its store.
    importers = [str(p.relative_to(REPO)) for package in ALLOWED for p in (REPO / package).rglob("*.py")
                 if {"labml_app", "labml_db"} & imported_packages(p)]
    assert importers and all(p.startswith("dashboard/") for p in importers), importers


def test_the_labml_app_seam_names_every_private_name_it_uses() -> None:
    used = private_names_used(LABML_APP_SEAM)
    assert {"_update_run", "_json", "_save_cache"} <= {name for _, name in used}  # the check sees them
    doc = ast.get_docstring(ast.parse(LABML_APP_SEAM.read_text())) or ""
    assert sorted({name for _, name in used if not re.search(rf"\b{re.escape(name)}\b", doc)}) == []


def test_every_kind_of_private_name_use_is_seen(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text(
        "from labml_app import handlers\nfrom labml_app.handlers import _update_run\nfrom labml_db import Key\n"
        "from labml_db.driver.file import FileDbDriver\nfrom numpy.core import multiarray\n\n"
        "class Ours:\n    def __init__(self, c):\n        self._mine = c._mine\n\n"
        "class Driver(FileDbDriver):\n"
        "    def _path(self, key):\n"                        # an override
        "        return self._db_path / key\n"              # its parent's attribute
        "    def save(self, key):\n        self._note = self._path(key)\n\n"
        "async def track(request, body, run):\n"
        "    request._json = body\n"                         # a write on a parameter
        "    name = Key('a')._key\n"                         # a read off a stock name's instance
        "    await handlers._update_run(request)\n"          # off a stock module
        "    return getattr(run, '_key'), multiarray._reconstruct, run._mine\n"  # numpy's: theirs; _mine: ours
    )
    assert private_names_used(module) == [
        (2, "_update_run"), (12, "_path"), (13, "_db_path"), (18, "_json"), (19, "_key"), (20, "_update_run"), (21, "_key")]
