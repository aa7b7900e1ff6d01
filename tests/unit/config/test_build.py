import pytest

from cpuft.cli.main import build_parser
from cpuft.config import ClassifierConfig, build_config, load_config_file
from cpuft.errors import CpuftError


def parse(*argv):
    from cpuft.cli.flags import given_flags

    args = build_parser().parse_args(["train", *argv])
    file_values = load_config_file(args.config) if args.config else {}
    return build_config(file_values, given_flags(args))


def test_defaults_are_the_default_job():
    cfg = parse()
    assert cfg.model.model == "" and cfg.data.task == "" and cfg.optimization.epochs == 1.0 \
        and cfg.speedups.precision == "auto"


def test_flags_override_toml(tmp_path):
    f = tmp_path / "c.toml"
    f.write_text('lr = 3e-5\nbatch-size = 16\ntext_columns = "a,b"\n')
    cfg = parse("--config", str(f), "--batch-size", "8", "--no-fused-optimizer")
    assert (cfg.optimization.lr, cfg.optimization.batch_size,
            cfg.of(ClassifierConfig).text_columns,
            cfg.speedups.fused_optimizer) == (
        3e-5, 8, ["a", "b"], False)


def test_yaml_config(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text("train:\n  max_steps: 7\n  precision: fp32\n")
    cfg = parse("--config", str(f))
    assert (cfg.optimization.max_steps, cfg.speedups.precision) == (7, "fp32")


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


def test_section_tables_in_a_config_file(tmp_path):
    f = tmp_path / "c.toml"
    f.write_text('[optimization]\nlr = 3e-5\n[data]\nmax-seq-length = 64\n')
    cfg = parse("--config", str(f))
    assert (cfg.optimization.lr, cfg.data.max_seq_length) == (3e-5, 64)
    f.write_text('[data]\nlr = 3e-5\n')
    with pytest.raises(CpuftError, match=r"unknown setting data\.lr"):
        parse("--config", str(f))


@pytest.mark.parametrize(("text", "message"), [
    ('precision = "fp16"\n', "'fp16' is not one of auto, bf16, fp32"),
    ('epochs = inf\n', "--epochs must be a finite number"),
    ('text_columns = [1]\n', "expected list"),
])
def test_choices_and_numbers_are_checked_when_the_config_is_built(tmp_path, text, message):
    f = tmp_path / "c.toml"
    f.write_text(text)
    with pytest.raises(CpuftError, match=message):
        parse("--config", str(f))


def test_every_setting_has_help_and_every_recipe_choice_a_recipe():

    from cpuft.config import registered_recipes
    from cpuft.config.fields import settings

    assert all(s.help for s in settings().values())
    assert settings()["recipe"].choices == tuple(registered_recipes())
    assert tuple(registered_recipes()) == ("classifier", "causal-lm")
    assert {s.name for s in settings().values() if s.recipe == "causal-lm"} == {
        "lora_r", "lora_alpha", "lora_dropout", "lora_targets", "merge",
        "gradient_checkpointing"}


def test_save_every_is_a_duration_and_an_elastic_job_saves_every_ten_minutes():
    from cpuft.job.build import save_seconds

    assert parse("--save-every", "1h30m").output.save_every == "1h30m"
    with pytest.raises(CpuftError, match="--save-every 'often': give a duration"):
        parse("--save-every", "often")
    assert save_seconds("", "") == 0.0
    assert save_seconds("", "2:3") == 600.0
    assert save_seconds("90s", "2:3") == 90.0
