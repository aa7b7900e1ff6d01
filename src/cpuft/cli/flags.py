"""argparse flags built from the config's settings, so each setting is declared once: cpuft
train's, and those of other commands that take a train setting."""

from __future__ import annotations

import argparse
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from cpuft.cli.hf_only import add_hf_only_flags, hf_only_settings, truth
from cpuft.config import TrainConfig, build_config, load_config_file
from cpuft.config.fields import Setting, all_sections, settings
from cpuft.config.hf_names import HF_NAMES
from cpuft.config.sections import SECTIONS


def _comma_list(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def _given_once(action: argparse.Action, namespace: argparse.Namespace, option: str | None,
                value: Any) -> None:
    """Refuse one setting given by two spellings with different values (``--learning_rate
    1e-3 --lr 5e-5``): the last would win in silence. One spelling twice is argparse's: the
    last wins."""
    seen: dict[str, tuple[str | None, Any]] = vars(namespace).setdefault("_given_as", {})
    first = seen.setdefault(action.dest, (option, value))
    if first[0] != option and first[1] != value:
        raise argparse.ArgumentError(None, f"{first[0]} {_shown(first[1])} and {option} "
                                           f"{_shown(value)} set one setting: give one of them")


def _shown(value: Any) -> str:
    return ",".join(map(str, value)) if isinstance(value, list) else str(value)


class _Store(argparse._StoreAction):
    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        _given_once(self, namespace, option_string, values)
        super().__call__(parser, namespace, values, option_string)


class _Switch(argparse.BooleanOptionalAction):
    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        option = option_string or ""
        on = not option.startswith("--no-")
        # --x and --no-x are one spelling, on or off: the last of them wins
        _given_once(self, namespace, option if on else "--" + option.removeprefix("--no-"), on)
        super().__call__(parser, namespace, values, option_string)


class _Bf16(argparse.Action):
    """HF's ``--bf16``, alone or with a value as HfArgumentParser takes it (``--bf16 True``):
    ``--precision bf16``, or fp32 for false."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        precision = "bf16" if values is None or truth(values) else "fp32"
        _given_once(self, namespace, option_string, precision)
        setattr(namespace, self.dest, precision)


def _flag(group: Any, s: Setting, aliases: Sequence[str] = (),
          default: tuple[Any, str] | None = None) -> None:
    """One setting's flag, absent from the parsed arguments unless given (or, with
    ``default``, that value, shown as its text)."""
    shown = repr(s.default) if default is None else default[1]
    # A help text that names its own default (one that depends on the recipe) keeps it alone.
    said = "(default:" in s.help
    kwargs: dict[str, Any] = {
        "dest": s.name,
        "default": argparse.SUPPRESS if default is None else default[0],
        "help": s.help if said else f"{s.help} (default: {shown})",
    }
    kwargs["action"] = _Store
    if s.kind is bool:
        kwargs["action"] = _Switch
    elif s.kind is list:
        kwargs["type"] = _comma_list
        kwargs["metavar"] = "A[,B]"
    elif {"yes", "no"} <= set(s.choices):  # --resume alone is yes; --resume auto
        kwargs.update(nargs="?", const="yes", choices=s.choices)
    elif s.choices:
        kwargs["choices"] = s.choices
    else:
        kwargs["type"] = s.kind  # non-finite numbers: config_from refuses them, one line
        kwargs["metavar"] = s.name.upper()
    group.add_argument("--" + s.name.replace("_", "-"), *aliases, **kwargs)


def add_train_flags(parser: argparse.ArgumentParser) -> None:
    """One flag per setting, grouped by section; unset flags stay absent, so a config file can
    fill them."""
    parser.add_argument("--config", metavar="FILE", help="TOML or YAML file of these settings; "
                        "flags given on the command line override it.")
    groups = {name: parser.add_argument_group(
        f"{name} settings" if name in SECTIONS else f"{name} recipe settings (other recipes "
        "refuse them)") for name in all_sections()}
    for s in settings().values():
        _flag(groups[s.section], s, HF_NAMES.get(s.name, ()))
    groups["speedups"].add_argument(
        "--bf16", dest="precision", action=_Bf16, nargs="?", metavar="BOOL",
        default=argparse.SUPPRESS, help="HF Trainer's --bf16 (or --bf16 True): --precision "
        "bf16; --bf16 False: --precision fp32")
    add_hf_only_flags(parser)


def add_setting_flags(group: Any, names: Iterable[str],
                      aliases: Mapping[str, Sequence[str]] | None = None,
                      defaults: Mapping[str, tuple[Any, str]] | None = None) -> None:
    """Flags for the train settings ``names``, as ``cpuft train`` declares them, for another
    command: with older spellings in ``aliases``, and the command's own ``defaults`` (value,
    text for help) where a setting's differs."""
    known = settings()
    for name in names:
        _flag(group, known[name], (aliases or {}).get(name, ()), (defaults or {}).get(name))


def given_flags(args: argparse.Namespace, names: Iterable[str] | None = None
                ) -> dict[str, Any]:
    """The train settings given on the command line (of ``names`` only, where given)."""
    wanted = set(settings()) if names is None else set(names)
    return {k: v for k, v in vars(args).items() if k in wanted}


def config_from_args(args: argparse.Namespace) -> TrainConfig:
    """The config these parsed train flags give (HF's own among them), over their --config
    file if any."""
    given = given_flags(args)
    given |= hf_only_settings(args, given)
    return build_config(load_config_file(args.config) if args.config else {}, given)


def rank_train_config(train_args: Sequence[str], min_nodes: int | None = None,
                      max_nodes: int | None = None) -> TrainConfig:
    """The settings ``cpuft train TRAIN_ARGS`` takes, checked here once rather than on every
    rank of a job: its flags, and with ``min_nodes`` (an elastic job) that its batch splits
    over every node count it may run on."""
    from cpuft.cli.main import build_parser
    from cpuft.launch.elastic import check_batch_splits

    cfg = config_from_args(build_parser().parse_args(["train", *train_args]))
    if min_nodes is not None and max_nodes is not None:
        check_batch_splits(cfg.optimization.batch_size, min_nodes, max_nodes)
    return cfg
