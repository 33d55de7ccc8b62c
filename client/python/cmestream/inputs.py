"""Checks of everything a caller passes, done before anything is sent.

Why here and not only in the daemon: the daemon checks each ingest message (batch) on its own,
so a NaN at row 4,500 of an array streamed in batches of 1,000 was refused only after 4,000
pairs had been applied, and re-sending without a producer id applied those twice. The whole
input is checked first, and the error names the argument, the row and the column:

- arrays: real numbers only (integers or floats; not bool, complex, strings, dates or objects),
  finite, of the model's shape; state ids: integers in [0, num_states);
- scalar arguments: the right type (TypeError) and a range the wire can carry (ValueError
  naming the argument, never a protobuf message); the daemon checks the model-specific ranges
  (its INVALID_ARGUMENT answers are ValueErrors too, see client.InvalidArgumentError);
- unknown ModelConfig fields: TypeError, as for any unexpected keyword argument.
"""
from __future__ import annotations

import difflib
import math
import numbers
from typing import Optional

import numpy as np
from google.protobuf.descriptor import FieldDescriptor

from cmestream.v1 import cmestream_pb2 as pb

UINT32_MAX = (1 << 32) - 1
UINT64_MAX = (1 << 64) - 1
INT32_MAX = (1 << 31) - 1


def _first_bad_element(a: np.ndarray) -> str:
    """' (row R holds X)' for the first element of an object array that is not a real number."""
    flat = a.reshape(-1)
    for i, v in enumerate(flat):
        if isinstance(v, bool) or not isinstance(v, numbers.Real):
            index = np.unravel_index(i, a.shape) if a.ndim else ()
            where = ", ".join(str(int(j)) for j in index)
            return f" ([{where}] holds {v!r})"
    return ""


def real_array(values, what: str) -> np.ndarray:
    """values as a float64 array; ValueError unless they are real numbers (ints, floats)."""
    try:
        a = np.asarray(values)
    except (ValueError, TypeError) as e:  # ragged nested lists, unconvertible objects
        raise ValueError(f"{what}: expected an array of real numbers ({e})") from None
    # dtype kinds: i/u integers, f floats. Not b (bool), c (complex), m/M (timedelta/datetime:
    # numpy counts timedelta64 as an integer type), O (objects), U/S (strings), V (records).
    if a.dtype.kind not in "iuf":
        detail = _first_bad_element(a) if a.dtype.kind == "O" else ""
        raise ValueError(f"{what}: expected real numbers, got an array of dtype {a.dtype}{detail}")
    return a.astype(np.float64, copy=False)


def _where_not_finite(a: np.ndarray, what: str) -> None:
    bad = ~np.isfinite(a)
    if bad.any():
        row, col = (int(j) for j in np.argwhere(bad)[0])
        raise ValueError(f"{what}: row {row}, column {col} is {a[row, col]}, expected finite "
                         f"numbers (nothing was sent)")


def as_points(values, dim: int, what: str = "points", model: str = "") -> np.ndarray:
    """values as a C-contiguous (n, dim) float64 array of finite numbers. Accepted: an (n, dim)
    array, one point as a (dim,) vector, and for dim 1 also a flat (n,) vector. Anything else is
    a ValueError naming the expected shape: nothing is reshaped behind the caller's back (a
    (2, 3) array is not three 2-d points). A NaN or infinity is a ValueError naming its row and
    column."""
    a = real_array(values, what)
    of = f" for model '{model}' (dim {dim})" if model else f" (dim {dim})"
    if dim < 1:
        raise ValueError(f"{what}: model '{model}' is discrete (states, not points): pass state ids")
    if a.ndim == 0 and dim == 1:
        a = a.reshape(1, 1)
    elif a.ndim == 1 and dim == 1:
        a = a.reshape(-1, 1)
    elif a.ndim == 1 and a.shape[0] == dim:
        a = a.reshape(1, dim)
    if a.ndim != 2 or a.shape[1] != dim:
        raise ValueError(f"{what}: expected shape (n, {dim}) or ({dim},){of}, got {a.shape}")
    _where_not_finite(a, what)
    return np.ascontiguousarray(a)


def as_ids(ids, what: str = "state ids", num_states: Optional[int] = None,
           model: str = "") -> np.ndarray:
    """ids as a 1-D int64 array; ValueError for other shapes, non-integers, and ids outside
    [0, num_states) (when known), naming the first offending row."""
    try:
        a = np.asarray(ids)
    except (ValueError, TypeError) as e:
        raise ValueError(f"{what}: expected a 1-D sequence of state ids ({e})") from None
    if a.ndim == 0:
        a = a.reshape(1)
    if a.ndim != 1:
        raise ValueError(f"{what}: expected a 1-D sequence of state ids, got shape {a.shape}")
    if a.dtype.kind not in "iuf":
        detail = _first_bad_element(a) if a.dtype.kind == "O" else ""
        raise ValueError(f"{what}: expected integer state ids, got dtype {a.dtype}{detail}")
    if a.dtype.kind == "f":
        bad = ~(np.isfinite(a) & (np.mod(a, 1) == 0))
        if bad.any():
            row = int(np.argmax(bad))
            raise ValueError(f"{what}: expected integer state ids, got non-integral values "
                             f"(row {row} is {a[row]}; nothing was sent)")
    if a.dtype.kind == "u" and a.size and a.max() > np.iinfo(np.int64).max:
        row = int(np.argmax(a > np.iinfo(np.int64).max))
        raise ValueError(f"{what}: row {row} is {a[row]}, expected ids >= 0 below 2^63")
    a = a.astype(np.int64)
    if a.size and a.min() < 0:
        row = int(np.argmax(a < 0))
        raise ValueError(f"{what}: expected ids >= 0, got {int(a[row])} at row {row} "
                         "(nothing was sent)")
    if num_states and a.size and a.max() >= num_states:
        row = int(np.argmax(a >= num_states))
        of = f"model '{model}' has num_states {num_states}" if model else f"num_states {num_states}"
        raise ValueError(f"{what}: row {row} is {int(a[row])}, expected a state id in "
                         f"[0, {num_states}) ({of}; nothing was sent)")
    return a


# -- scalar arguments --------------------------------------------------------------------------

def integer(name: str, value, minimum: int = 0, maximum: int = UINT32_MAX) -> int:
    """value as an int in [minimum, maximum]: TypeError for a non-integer (bool included),
    ValueError naming `name` when out of range."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (numbers.Integral, np.integer)):
        raise TypeError(f"{name}: expected an integer, got {type(value).__name__} {value!r}")
    value = int(value)
    if not minimum <= value <= maximum:
        raise ValueError(f"{name}: expected an integer in [{minimum}, {maximum}], got {value}")
    return value


def real(name: str, value, minimum: Optional[float] = None, positive: bool = False) -> float:
    """value as a finite float (>= minimum, > 0 with `positive`): TypeError for a non-number,
    ValueError naming `name` otherwise."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (numbers.Real, np.number)) \
            or isinstance(value, (complex, np.complexfloating)):
        raise TypeError(f"{name}: expected a real number, got {type(value).__name__} {value!r}")
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"{name}: expected a finite number, got {value}")
    if positive and value <= 0:
        raise ValueError(f"{name}: expected a number > 0, got {value}")
    if minimum is not None and value < minimum:
        raise ValueError(f"{name}: expected a number >= {minimum}, got {value}")
    return value


def text(name: str, value) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{name}: expected a string, got {type(value).__name__} {value!r}")
    return value


# -- ModelConfig keyword arguments -------------------------------------------------------------

_CONFIG_FIELDS = {f.name: f for f in pb.ModelConfig.DESCRIPTOR.fields}
_INTEGER_RANGE = {FieldDescriptor.TYPE_UINT32: (0, UINT32_MAX),
                  FieldDescriptor.TYPE_UINT64: (0, UINT64_MAX),
                  FieldDescriptor.TYPE_INT32: (-(1 << 31), INT32_MAX),
                  FieldDescriptor.TYPE_INT64: (-(1 << 63), (1 << 63) - 1)}


def config_fields(function: str, config: dict) -> dict:
    """The keyword arguments of create_model (other than name, dim, sigma) as ModelConfig field
    values: `lambda_` is `lambda`; an unknown name is a TypeError (with the nearest field
    names); a value of the wrong type a TypeError and a value the field cannot hold (a negative
    count, a count beyond 2^32 - 1, NaN) a ValueError, each naming the argument."""
    out = {}
    for key, value in config.items():
        field_name = "lambda" if key == "lambda_" else key
        field = _CONFIG_FIELDS.get(field_name)
        if field is None or field_name in ("name", "dim", "sigma"):
            near = difflib.get_close_matches(key, list(_CONFIG_FIELDS), n=3)
            hint = f" (did you mean {', '.join(near)}?)" if near else ""
            raise TypeError(f"{function}() got an unexpected keyword argument '{key}'{hint}")
        kind = field.type
        repeated = field.label == field.LABEL_REPEATED

        def one(v, label=key):
            if kind in _INTEGER_RANGE:
                lo, hi = _INTEGER_RANGE[kind]
                return integer(label, v, lo, hi)
            if kind in (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT):
                return real(label, v)
            if kind == FieldDescriptor.TYPE_BOOL:
                if not isinstance(v, (bool, np.bool_)):
                    raise TypeError(f"{label}: expected True or False, got {type(v).__name__} {v!r}")
                return bool(v)
            if kind == FieldDescriptor.TYPE_STRING:
                return text(label, v)
            raise TypeError(f"{label}: field type {kind} is not supported by this client")

        if repeated:
            if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
                raise TypeError(f"{key}: expected a sequence, got {type(value).__name__} {value!r}")
            out[field_name] = [one(v, f"{key}[{i}]") for i, v in enumerate(value)]
        else:
            out[field_name] = one(value)
    return out
