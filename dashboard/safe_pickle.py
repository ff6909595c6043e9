"""labml-app's stored models read as data, never as code.

labml-app keeps each model as a pickle (in files under --data, or in MongoDB), and a pickle may
name any importable callable for the loader to call: a crafted `models/Run:<key>.pkl` runs code
in the dashboard on the next request that reads it.  What labml-app stores is plain data (dicts,
lists, sets, strings, numbers, None), `labml_db` keys, and numpy arrays and scalars of numbers
(its metric series); `loads` accepts exactly that:
- the loader may look up only the few constructors those need (`ALLOWED`), each refusing what it
  was not made for (an object dtype, an ndarray subclass, an encoding other than latin-1), so
  no other callable is ever reached and nothing of the record's choosing runs;
- the result is then walked, and anything else in it (a key with other attributes, an array of
  objects) refuses the whole record.
A refused or unreadable record is `UnsafeRecord`; the store treats it as missing, with a warning
(`read_record`), in files (see `store`) as in MongoDB (`labml_app_patches.read_mongo_records_as_data`).
"""

from __future__ import annotations

import _codecs
import io
import pickle
from typing import Any, cast

import numpy as np
from labml_db import Key
from labml_db.serializer.pickle import PickleSerializer

from dashboard.connections import NOTE

try:  # numpy 2 moved its core; stores written under numpy 1 name the old module
    from numpy._core import multiarray
except ImportError:  # pragma: no cover - numpy 1
    from numpy.core import multiarray  # type: ignore[no-redef]

NUMBER_KINDS = frozenset("biufc")  # bool, int, unsigned, float, complex


class UnsafeRecord(ValueError):
    """A stored record that is not plain data (or not a pickle at all)."""


def _dtype(spec: Any, *args: object) -> np.dtype:
    dtype = np.dtype(spec)
    if dtype.kind not in NUMBER_KINDS or dtype.hasobject:
        raise UnsafeRecord(f"an array of {dtype} (only numbers are stored)")
    return dtype


class _ArrayType:
    """What the loader gets for `numpy.ndarray`: only `_reconstruct` takes it; called, it fails
    (`numpy.ndarray(shape)` would allocate whatever a record asked)."""


def _reconstruct(subtype: object, shape: object, dtype_char: object) -> np.ndarray:
    # numpy pickles an empty array and fills it from the record's own bytes (`__setstate__`
    # checks their length), so the memory taken is bounded by the record's size.
    if not isinstance(subtype, _ArrayType) or shape != (0,):
        raise UnsafeRecord(f"an array made as {subtype!r} of shape {shape!r}")
    return cast(np.ndarray, multiarray._reconstruct(np.ndarray, (0,), dtype_char))


def _frombuffer(buffer: object, dtype: object, shape: Any, order: Any) -> np.ndarray:
    # How protocol 5 pickles an array: a view of the record's own bytes.
    if not isinstance(dtype, np.dtype) or not isinstance(buffer, (bytes, bytearray, pickle.PickleBuffer)):
        raise UnsafeRecord("an array made from something other than its bytes")
    return np.frombuffer(memoryview(buffer), dtype=_dtype(dtype)).reshape(shape, order=order)


def _scalar(dtype: Any, *data: Any) -> Any:
    if not isinstance(dtype, np.dtype) or dtype.kind not in NUMBER_KINDS or dtype.hasobject:
        raise UnsafeRecord(f"a scalar of {dtype!r}")
    return multiarray.scalar(dtype, *data)


def _latin1(text: object, encoding: object = "latin1") -> bytes:
    # How protocol 2 pickles store bytes (numpy's raw data among them).
    if not isinstance(text, str) or encoding not in ("latin1", "latin-1"):
        raise UnsafeRecord("an encoded value other than latin-1 text")
    return _codecs.encode(text, "latin1")


ALLOWED: dict[tuple[str, str], Any] = {
    ("labml_db.model", "Key"): Key,
    # Protocol 2 pickles name Python 2's module for these.
    **{(module, name): kind for module in ("builtins", "__builtin__") for name, kind in (("set", set), ("frozenset", frozenset))},
    ("_codecs", "encode"): _latin1,
    ("numpy", "ndarray"): _ArrayType(),
    ("numpy", "dtype"): _dtype,
    **{(module, "_reconstruct"): _reconstruct for module in ("numpy._core.multiarray", "numpy.core.multiarray")},
    **{(module, "scalar"): _scalar for module in ("numpy._core.multiarray", "numpy.core.multiarray")},
    **{(module, "_frombuffer"): _frombuffer for module in ("numpy._core.numeric", "numpy.core.numeric")},
}
PLAIN = (str, bytes, int, float, complex, bool, type(None))


class _Unpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        found = ALLOWED.get((module, name))
        if found is None:
            raise UnsafeRecord(f"it names {module}.{name}, which a stored record never needs")
        return found

    def persistent_load(self, pid: object) -> None:
        raise UnsafeRecord("it holds a persistent reference")


def check_plain(value: Any) -> None:
    """`UnsafeRecord` unless `value` holds only what labml-app stores (see the module's doc)."""
    seen: set[int] = set()
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, PLAIN) or id(item) in seen:
            continue
        seen.add(id(item))
        kind = type(item)
        if kind in (list, tuple, set, frozenset):
            stack.extend(item)
        elif kind is dict:
            stack.extend(item.keys())
            stack.extend(item.values())
        elif kind is Key:
            if not _only_a_name(item):
                raise UnsafeRecord("a key with other contents than its name")
        elif kind is np.ndarray or isinstance(item, np.generic):
            if item.dtype.kind not in NUMBER_KINDS or item.dtype.hasobject:
                raise UnsafeRecord(f"an array of {item.dtype}")
        else:
            raise UnsafeRecord(f"a {kind.__module__}.{kind.__qualname__}")


def _only_a_name(key: Key) -> bool:
    """Whether `key` holds its name (text) and nothing else, as a key made from that name does:
    read through its public `str`, which fails on a name that is not text or on none at all."""
    try:
        return vars(Key(str(key))) == vars(key)
    except (TypeError, AttributeError):
        return False


def loads(data: bytes) -> Any:
    """The record `data` holds, or `UnsafeRecord` naming what is wrong with it."""
    try:
        value = _Unpickler(io.BytesIO(data)).load()
    except UnsafeRecord:
        raise
    except Exception as e:  # a truncated or garbled pickle: many kinds of error
        raise UnsafeRecord(f"not a readable pickle ({type(e).__name__})") from None
    check_plain(value)
    return value


def read_record(data: bytes, where: str) -> Any:
    """The record `data` holds; None, with a rate-limited warning naming `where`, if it is refused."""
    try:
        return loads(data)
    except UnsafeRecord as e:
        NOTE("unsafe-record", f"store record {where} is not plain data ({e}); it is treated as missing and "
                              f"nothing in it was run")
        return None


class SafePickleSerializer(PickleSerializer):
    """labml_db's pickle serializer, reading through `loads`."""

    def from_string(self, data: bytes | None) -> Any:
        return None if data is None else loads(data)

