"""Reading data files without trusting them: no code from data, bounded memory.

- CIFAR's python batches are pickles. `load_array_pickle` unpickles them with
  a restricted reader that resolves only what the format holds (a dict of
  bytes/str keys, lists, numbers, and numpy arrays of plain dtypes); any other
  global (os.system, builtins.eval, ...) is refused before anything runs.
- Gzipped files (MNIST IDX, text corpora) and tar members are read through
  `read_capped`, which stops at MAX_DECOMPRESSED bytes with a clear error
  instead of inflating a decompression bomb into memory.
"""
from __future__ import annotations

import io
import pickle
import zlib
from pathlib import Path

import numpy as np

from nas_stab.errors import DataError

MAX_DECOMPRESSED = 4 << 30  # bytes one data file may decompress to (CIFAR-10 is 180 MB, MNIST 55 MB)
MAX_PICKLE = 1 << 30  # bytes of one pickled batch


def _reconstruct(subtype, shape, dtype):
    if subtype is not np.ndarray:
        raise pickle.UnpicklingError(f"array subtype {subtype!r} is not allowed")
    return np.ndarray.__new__(np.ndarray, shape, _dtype(dtype))


def _dtype(spec, align=False, copy=False):
    d = np.dtype(spec, align, copy) if not isinstance(spec, np.dtype) else spec
    if d.hasobject:
        raise pickle.UnpicklingError("object arrays are not allowed")
    return d


def _frombuffer(buf, dtype, shape, order):
    return np.frombuffer(buf, dtype=_dtype(dtype)).reshape(shape, order=order)


def _latin1(text, encoding="latin1"):
    """How protocol-2 pickles written by Python 3 spell bytes: _codecs.encode(str, 'latin1')."""
    if not isinstance(text, str) or encoding not in ("latin1", "latin-1"):
        raise pickle.UnpicklingError("only latin1 byte strings are allowed")
    return text.encode("latin1")


def _scalar(dtype, data=None):
    """A numpy scalar (a label stored as np.int64, say): its dtype (no objects) and raw bytes."""
    d = _dtype(dtype)
    if not isinstance(data, (bytes, bytearray)) or len(data) != d.itemsize:
        raise pickle.UnpicklingError("a numpy scalar needs exactly its dtype's bytes")
    return np.frombuffer(bytes(data), dtype=d)[0]


_ALLOWED = {
    ("numpy.core.multiarray", "scalar"): _scalar,
    ("numpy._core.multiarray", "scalar"): _scalar,
    ("_codecs", "encode"): _latin1,
    ("numpy.core.numeric", "_frombuffer"): _frombuffer,
    ("numpy._core.numeric", "_frombuffer"): _frombuffer,
    ("numpy.core.multiarray", "_reconstruct"): _reconstruct,
    ("numpy._core.multiarray", "_reconstruct"): _reconstruct,
    ("numpy", "ndarray"): np.ndarray,
    ("numpy", "dtype"): _dtype,
}


class _ArrayUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str):
        try:
            return _ALLOWED[(module, name)]
        except KeyError:
            raise pickle.UnpicklingError(f"{module}.{name} is not allowed in a data file (only arrays, lists, numbers, text)") from None


def load_array_pickle(path: Path):
    """A pickled dict of arrays and lists (CIFAR's python batches), read without running any code."""
    with open(path, "rb") as f:
        raw = f.read(MAX_PICKLE + 1)
    if len(raw) > MAX_PICKLE:
        raise DataError(f"{path}: larger than {MAX_PICKLE} bytes; not a CIFAR batch")
    return _ArrayUnpickler(io.BytesIO(raw), encoding="bytes").load()


def read_capped(f, name: str, limit: int | None = None) -> bytes:
    """Everything `f` yields, at most `limit` (default MAX_DECOMPRESSED) bytes; DataError beyond, or on a corrupt stream."""
    limit = MAX_DECOMPRESSED if limit is None else limit
    try:
        data = f.read(limit + 1)
    except (zlib.error, EOFError, OSError) as e:
        raise DataError(f"{name}: corrupt or truncated compressed data ({type(e).__name__}: {e})") from None
    if len(data) > limit:
        raise DataError(f"{name}: decompresses to more than {limit} bytes (the limit for one data file); "
                        "a damaged file or a decompression bomb")
    return data
