"""A C function's ctypes binding, read from its prototype in the C source.

The prototype is the one declaration of a kernel's arguments: Python calls a ``Kernel`` by the
parameter names the C source gives, never by position, so a C signature and its caller cannot
drift apart in silence.
"""

from __future__ import annotations

import ctypes
import re
from dataclasses import dataclass
from typing import Any

_SCALARS: dict[str, Any] = {
    "int": ctypes.c_int, "int64_t": ctypes.c_int64, "uint64_t": ctypes.c_uint64,
    "uint32_t": ctypes.c_uint32, "uint16_t": ctypes.c_uint16, "float": ctypes.c_float,
    "double": ctypes.c_double, "void": None,
}
_PROTOTYPE = r"^(?P<ret>[\w ]+?)\s+{name}\s*\((?P<params>[^)]*)\)\s*\{{"


@dataclass(frozen=True, slots=True)
class Param:
    name: str
    ctype: Any


def _ctype(declared: str) -> Any:
    """The ctypes type of one C type: scalars as they are, ``T *`` as a pointer to T (``void *``
    as an address), ``T *const *`` as an array of addresses."""
    stars = declared.count("*")
    base = " ".join(w for w in declared.replace("*", " ").split() if w != "const")
    if base not in _SCALARS:
        raise ValueError(f"C type {declared!r} has no ctypes binding here")
    scalar = _SCALARS[base]
    if stars == 0:
        return scalar
    if stars == 1:
        return ctypes.c_void_p if scalar is None else ctypes.POINTER(scalar)
    return ctypes.POINTER(ctypes.c_void_p)


def parse_prototype(source: str, name: str) -> tuple[Any, list[Param]]:
    """(return type, parameters) of the function ``name`` defined in ``source``."""
    found = re.search(_PROTOTYPE.format(name=re.escape(name)), source, re.MULTILINE)
    if found is None:
        raise ValueError(f"no definition of {name} in the C source")
    params = []
    for text in found["params"].split(","):
        text = " ".join(text.split())
        split = re.match(r"(?P<type>.*?[\s*])(?P<name>\w+)$", text)
        if split is None:
            raise ValueError(f"{name}: cannot read the parameter {text!r}")
        params.append(Param(split["name"], _ctype(split["type"])))
    return _ctype(found["ret"]), params


class Kernel:
    """One C function of a loaded library, called with keyword arguments named as in C."""

    def __init__(self, function: Any, source: str, name: str) -> None:
        restype, self.params = parse_prototype(source, name)
        function.restype = restype
        function.argtypes = [p.ctype for p in self.params]
        self._function, self.name = function, name

    def __call__(self, **arguments: Any) -> Any:
        names = [p.name for p in self.params]
        if set(arguments) != set(names):
            missing, extra = set(names) - set(arguments), set(arguments) - set(names)
            raise TypeError(f"{self.name}: missing {sorted(missing)}, unknown {sorted(extra)}")
        return self._function(*[arguments[n] for n in names])
