"""Every setting by its flat name (the flag, the config-file key), with its section, type,
default, choices and help: read off the section dataclasses, so that a setting is declared once.
"""

from __future__ import annotations

import ast
import inspect
import itertools
import typing
from dataclasses import MISSING, dataclass, fields
from functools import cache
from typing import Any

from cpuft.config import sections
from cpuft.errors import CpuftError


@dataclass(frozen=True, slots=True)
class Setting:
    name: str
    section: str
    default: Any
    kind: type
    """bool, int, float, str or list (of str)."""
    choices: tuple[str, ...]
    """The Literal's values; empty for a free value."""
    help: str
    recipe: str = ""
    """The one recipe that reads it (its section's); empty when every recipe does."""
    same_on_resume: bool = False
    """A resumed run must keep its value."""


def _docstrings(cls: type) -> dict[str, str]:
    """Each field's docstring (the string under its annotation), as torchtitan documents its
    job config."""
    tree = ast.parse(inspect.getsource(cls))
    body = tree.body[0].body  # type: ignore[attr-defined]
    docs: dict[str, str] = {}
    for node, after in itertools.pairwise(body):
        if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
                and isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant)):
            docs[node.target.id] = " ".join(str(after.value.value).split())
    return docs


def _kind_and_choices(hint: Any) -> tuple[type, tuple[str, ...]]:
    if typing.get_origin(hint) is typing.Literal:
        return str, tuple(typing.get_args(hint))
    if typing.get_origin(hint) is list:
        return list, ()
    return hint, ()


def all_sections() -> dict[str, type]:
    """The shared sections, then each registered recipe's own, by name."""
    from cpuft.config.recipes import registered_recipes

    own = {name: spec.settings for name, spec in registered_recipes().items()
           if spec.settings is not None}
    return {**sections.SECTIONS, **own}


@cache
def settings() -> dict[str, Setting]:
    """Every setting by its flat name; cleared when a recipe registers."""
    from cpuft.config.recipes import registered_recipes

    out: dict[str, Setting] = {}
    for section, cls in all_sections().items():
        hints = typing.get_type_hints(cls)
        docs = _docstrings(cls)
        for f in fields(cls):
            if f.name in out:
                raise CpuftError(f"the {section} settings declare {f.name}, which the "
                                 f"{out[f.name].section} settings already have")
            default = f.default if f.default_factory is MISSING else f.default_factory()
            kind, choices = _kind_and_choices(hints[f.name])
            if f.name == "recipe":
                choices = tuple(registered_recipes())
            out[f.name] = Setting(name=f.name, section=section, default=default, kind=kind,
                                  choices=choices, help=docs.get(f.name, ""),
                                  recipe=section if section not in sections.SECTIONS else "",
                                  same_on_resume=f.metadata.get("same_on_resume", False))
    return out
