"""Units and the number rules every stage shares, in one place.

Every time in a trace is integer nanoseconds; byte sizes are binary (GiB = 2**30 bytes). A
number is *finite* when it is a real number (a Python or numpy int or float, never a bool or a
string) and neither NaN nor infinite; JSON gets ``null`` where a number is not finite.
"""

from __future__ import annotations

import math
import numbers
from typing import Any, TypeGuard

NS_PER_S = 1_000_000_000
NS_PER_MS = 1_000_000
MS_PER_S = 1_000
MIB = 1 << 20
GIB = 1 << 30
GB = 1e9  # decimal gigabytes: memory bandwidth (GB/s) and the weights read per token


def finite(value: object) -> TypeGuard[int | float]:
    """A real number that is neither NaN nor infinite (``True`` and ``"3"`` are not numbers)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return False
    return math.isfinite(float(value))


def json_safe(value: Any) -> Any:
    """``value`` with every number JSON can hold: NaN and infinities become None, numpy scalars
    Python ones; mappings and sequences are walked (keys become strings)."""
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    if isinstance(value, bool | str) or value is None:
        return value
    if hasattr(value, "item") and callable(value.item) and not isinstance(value, int | float):
        value = value.item()  # numpy scalars (np.bool_ included) -> Python
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    return value
