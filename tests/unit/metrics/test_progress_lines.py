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
