"""Front-end libraries labml-app's index.html loads from CDNs, fetched from the npm registry.

The page is blank without d3, so a dashboard on a machine without general internet
access needs local copies.  Each package is downloaded once from the npm registry,
checked against its pinned integrity hash, and only the files the page needs are
extracted into a cache folder outside the repository.
"""

from __future__ import annotations

import base64
import hashlib
import io
import os
import shutil
import tarfile
import tempfile
import urllib.request
from dataclasses import dataclass
from pathlib import Path

REGISTRY = "https://registry.npmjs.org"


@dataclass(frozen=True)
class VendorPackage:
    name: str  # npm name
    version: str
    integrity: str  # npm `dist.integrity` (sha512, base64)
    files: tuple[str, ...]  # paths inside the package; a trailing '/' takes a whole folder
    cdn_url: str  # what labml-app's index.html references
    local_path: str  # the file, relative to the package's local folder, that replaces cdn_url

    @property
    def folder(self) -> str:
        return f'{self.name.split("/")[-1]}-{self.version}'

    @property
    def tarball_url(self) -> str:
        return f'{REGISTRY}/{self.name}/-/{self.name.split("/")[-1]}-{self.version}.tgz'


# d3.v6.min.js on d3js.org is the last 6.x release.
PACKAGES: tuple[VendorPackage, ...] = (
    VendorPackage("d3", "6.7.0",
                  "sha512-hNHRhe+yCDLUG6Q2LwvR/WdNFPOJQ5VWqsJcwIYVeI401+d2/rrCjxSXkiAdIlpx7/73eApFB4Olsmh3YN7a6g==",
                  ("dist/d3.min.js",),
                  "https://d3js.org/d3.v6.min.js", "dist/d3.min.js"),
    VendorPackage("bootstrap", "5.0.0-beta2",
                  "sha512-e+uPbPHqTQWKyCX435uVlOmgH9tUt0xtjvyOC7knhKgOS643BrQKuTo+KecGpPV7qlmOyZgCfaM4xxPWtDEN/g==",
                  ("dist/css/bootstrap.min.css",),
                  "https://cdn.jsdelivr.net/npm/bootstrap@5.0.0-beta2/dist/css/bootstrap.min.css",
                  "dist/css/bootstrap.min.css"),
    # all.css refers to ../webfonts/, so both folders keep their relative layout.
    VendorPackage("@fortawesome/fontawesome-free", "5.9.0",
                  "sha512-g795BBEzM/Hq2SYNPm/NQTIp3IWd4eXSH0ds87Na2jnrAUFX3wkyZAI4Gwj9DOaWMuz2/01i8oWI7P7T/XLkhg==",
                  ("css/all.css", "webfonts/"),
                  "https://cdnjs.cloudflare.com/ajax/libs/font-awesome/5.9.0/css/all.css", "css/all.css"),
)

VENDOR_ROUTE = "/_vendor"
MAX_TARBALL_BYTES = 32 * 1024 * 1024


def default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "labml-dashboard" / "vendor"


def _check_integrity(data: bytes, integrity: str) -> None:
    algo, _, expected = integrity.partition("-")
    actual = base64.b64encode(hashlib.new(algo, data).digest()).decode("ascii")
    if actual != expected:
        raise ValueError(f"integrity check failed ({algo} {actual} != {expected})")


def _download(url: str, timeout_s: float) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout_s) as response:
        data = response.read(MAX_TARBALL_BYTES + 1)
    if len(data) > MAX_TARBALL_BYTES:
        raise ValueError(f"{url} is larger than {MAX_TARBALL_BYTES} bytes")
    return data


def _wanted(pkg: VendorPackage, member: tarfile.TarInfo) -> str | None:
    """The member's path inside the package if it is one of the files we keep."""
    # npm tarballs put everything under 'package/'.
    if not member.isfile() or not member.name.startswith("package/"):
        return None
    rel = member.name[len("package/"):]
    if ".." in Path(rel).parts or rel.startswith("/"):
        return None
    for f in pkg.files:
        if rel == f or (f.endswith("/") and rel.startswith(f) and "/" not in rel[len(f):]):
            return rel
    return None


def _install(pkg: VendorPackage, tarball: bytes, cache_dir: Path) -> None:
    cache_dir.mkdir(parents=True, exist_ok=True)
    # Extract beside the final folder and rename it into place, so a half-extracted
    # package is never mistaken for a complete one.
    tmp = Path(tempfile.mkdtemp(dir=cache_dir, prefix=f".{pkg.folder}."))
    try:
        with tarfile.open(fileobj=io.BytesIO(tarball), mode="r:gz") as tar:
            for member in tar.getmembers():
                rel = _wanted(pkg, member)
                if rel is None:
                    continue
                src = tar.extractfile(member)
                assert src is not None
                dest = tmp / rel
                dest.parent.mkdir(parents=True, exist_ok=True)
                dest.write_bytes(src.read())
        if not (tmp / pkg.local_path).is_file():
            raise ValueError(f"{pkg.name}@{pkg.version} has no {pkg.local_path}")
        try:
            os.rename(tmp, cache_dir / pkg.folder)
        except OSError:
            # Another dashboard finished the same package first; theirs is as good.
            if not (cache_dir / pkg.folder / pkg.local_path).is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


@dataclass
class VendorAssets:
    """Which packages are available locally, and why the others are not."""
    cache_dir: Path
    available: list[VendorPackage]
    errors: list[str]

    def rewrite_index(self, html: str) -> str:
        """labml-app's index.html with CDN URLs pointing at the local copies.

        The npm files are byte-identical to the CDN ones, so the page's SRI hash
        (bootstrap's `integrity=`) still holds and is left in place.
        """
        for pkg in self.available:
            html = html.replace(pkg.cdn_url, f"{VENDOR_ROUTE}/{pkg.folder}/{pkg.local_path}")
        return html


def ensure_assets(cache_dir: Path, *, timeout_s: float = 20.0) -> VendorAssets:
    """Make every package available in `cache_dir`, downloading what is missing.

    Never raises for network or registry problems: those end up in `errors`, and the
    page then keeps the CDN URL for that package (which works where there is internet).
    """
    available: list[VendorPackage] = []
    errors: list[str] = []
    for pkg in PACKAGES:
        if not (cache_dir / pkg.folder / pkg.local_path).is_file():
            try:
                tarball = _download(pkg.tarball_url, timeout_s)
                _check_integrity(tarball, pkg.integrity)
                _install(pkg, tarball, cache_dir)
            except Exception as e:  # any failure here only degrades the page
                errors.append(f"{pkg.name}@{pkg.version} from {pkg.tarball_url}: {e}")
                continue
        available.append(pkg)
    return VendorAssets(cache_dir, available, errors)


def vendor_folders(assets: VendorAssets) -> dict[str, Path]:
    return {pkg.folder: assets.cache_dir / pkg.folder for pkg in assets.available}
