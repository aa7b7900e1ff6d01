"""Without a terminal (a Slurm or Kubernetes log, nohup), training progress is a plain line
every so often and at the end: step, loss, samples/s, elapsed and left."""

from __future__ import annotations

from cpuft.metrics import LineProgressSink, ProgressSink, Ticker, progress_sink


def test_a_line_every_so_often_and_at_the_last_step(said):
    now = [100.0]
    sink = LineProgressSink("reviews", every_s=30.0, clock=lambda: now[0])
    sink.start(total_steps=10, first_step=2)
    for step in range(3, 11):
        now[0] += 10.0  # a step every 10 s
        sink.step({"step": step, "loss": 1.0 / step, "samples_per_second": 3.2})
    assert said == [
        "reviews: step 5/10 (50%), loss 0.2000, 3.2 samples/s, 0m30s elapsed, 0m50s left",
        "reviews: step 8/10 (80%), loss 0.1250, 3.2 samples/s, 1m00s elapsed, 0m20s left",
        "reviews: step 10/10 (100%), loss 0.1000, 3.2 samples/s, 1m20s elapsed, 0m00s left",
    ]


def test_a_terminal_gets_the_bar_and_a_log_file_the_lines(monkeypatch):
    monkeypatch.setattr("sys.stdout.isatty", lambda: False)
    assert isinstance(progress_sink("train"), LineProgressSink)
    monkeypatch.setattr("sys.stdout.isatty", lambda: True)
    bar = progress_sink("train")
    assert isinstance(bar, ProgressSink)
    bar.close()


def test_work_without_a_bar_says_how_far_it_is_every_so_often(said):
    now = [0.0]
    ticker = Ticker("evaluating", 1000, every_s=30.0, clock=lambda: now[0])
    for _ in range(10):  # 100 rows a tick, 10 s a tick
        now[0] += 10.0
        ticker.advance(100)
    assert said == ["evaluating: 300/1000 (30%), 0m30s elapsed, 1m10s left",
                    "evaluating: 600/1000 (60%), 1m00s elapsed, 0m40s left",
                    "evaluating: 900/1000 (90%), 1m30s elapsed, 0m10s left"]


def test_every_logging_step_is_a_line_in_trainers_words(said):
    sink = LineProgressSink("reviews", every_s=30.0, clock=lambda: 0.0)
    sink.start(total_steps=20)
    sink.log({"step": 10, "epoch": 0.5, "loss": 0.51234, "lr": 5e-5, "grad_norm": 1.2345,
              "samples_per_second": 98.76, "seconds": 3.0})
    sink.log({"step": 20, "epoch": 1.0, "loss": 0.4, "lr": 0.0, "samples_per_second": 99.0})
    assert said == [
        "step 10: loss 0.5123, learning_rate 5e-05, grad_norm 1.234, epoch 0.5, 98.8 samples/s",
        "step 20: loss 0.4000, learning_rate 0, epoch 1, 99.0 samples/s"]


def test_messages_carry_their_time_and_level_where_asked(tmp_path):
    import re
    import subprocess
    import sys

    from tests.helpers import cpuft_env

    code = "from cpuft.log import get_logger; get_logger('cpuft.x').info('hello')"
    for form, pattern in (("time", r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d INFO hello"),
                          ("", "hello")):
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             env=cpuft_env(CPUFT_LOG_FORMAT=form), check=True).stdout.strip()
        assert re.fullmatch(pattern, out), out
