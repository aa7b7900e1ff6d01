import pytest

from cpuft.cli.main import build_parser
from cpuft.config import build_config, load_config_file
from cpuft.errors import CpuftError


def parse(*argv):
    from cpuft.cli.flags import given_flags

    args = build_parser().parse_args(["train", *argv])
    file_values = load_config_file(args.config) if args.config else {}
    return build_config(file_values, given_flags(args))


def test_defaults_are_the_default_job():
    cfg = parse()
    assert cfg.model == "" and cfg.task == "" and cfg.epochs == 1.0 and cfg.precision == "auto"


def test_flags_override_toml(tmp_path):
    f = tmp_path / "c.toml"
    f.write_text('lr = 3e-5\nbatch-size = 16\ntext_columns = "a,b"\n')
    cfg = parse("--config", str(f), "--batch-size", "8", "--no-fused-optimizer")
    assert (cfg.lr, cfg.batch_size, cfg.text_columns, cfg.fused_optimizer) == (
        3e-5, 8, ["a", "b"], False)


def test_yaml_config(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text("train:\n  max_steps: 7\n  precision: fp32\n")
    cfg = parse("--config", str(f))
    assert (cfg.max_steps, cfg.precision) == (7, "fp32")


@pytest.mark.parametrize(
    ("text", "message"),
    [("bogus = 1\n", "unknown setting"), ("lr = 'fast'\n", "expected float"),
     ("lr = [\n", "does not parse")],
)
def test_bad_config_files(tmp_path, text, message):
    f = tmp_path / "c.toml"
    f.write_text(text)
    with pytest.raises(CpuftError, match=message):
        parse("--config", str(f))


@pytest.mark.parametrize("flag, value", [
    ("--batch-size", "0"), ("--weight-decay", "-1"), ("--max-grad-norm", "-1"),
    ("--threads", "-2"), ("--bucket-cap-mb", "-1"),
])
def test_invalid_values_rejected(flag, value):
    with pytest.raises(CpuftError, match=f"{flag} must be"):
        parse(flag, value)
