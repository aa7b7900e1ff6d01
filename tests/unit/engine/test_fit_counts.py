import pytest
import torch
from torch import nn

from cpuft.engine.fit import SCHEDULES, FitConfig, fit

MASKS = (torch.tensor([[1, 1, 0], [1, 0, 0]]), torch.tensor([[1, 0], [1, 0]]),
         torch.tensor([[1, 1, 1], [0, 0, 0]]))


class Batches:
    """Three batches of 2 samples whose masks hold 3, 2 and 3 real tokens."""

    def num_batches(self, epoch):
        return len(MASKS)

    def iterate(self, epoch, start=0):
        for mask in MASKS[start:]:
            yield {"x": torch.ones(mask.shape[0], 4), "attention_mask": mask}


def test_fit_notes_each_steps_real_tokens_over_its_micro_batches():
    model = nn.Linear(4, 1)
    result = fit(model, Batches(), FitConfig(total_steps=2, grad_accum=2, lr=1e-3),
                 loss_fn=lambda m, batch: m(batch["x"]).pow(2).mean())
    # Step 1 accumulates the first two batches, step 2 takes the epoch's last one.
    assert result.step_tokens == [5, 3]
    assert result.tokens == 8 and len(result.step_seconds) == 2


def test_a_checkpoint_is_written_once_the_time_since_the_last_one_has_passed(
        tmp_path, monkeypatch):
    import types

    import cpuft.engine.fit as fit_module

    clock = types.SimpleNamespace(now=0.0)
    monkeypatch.setattr(fit_module, "time", types.SimpleNamespace(perf_counter=lambda: clock.now))
    saved = []
    monkeypatch.setattr(fit_module, "save_checkpoint",
                        lambda out, step, state, **_: saved.append((step, clock.now)))

    def four_seconds_a_step(m, batch):
        clock.now += 4.0
        return m(batch["x"]).pow(2).mean()

    fit(nn.Linear(4, 1), Batches(), FitConfig(total_steps=8, lr=1e-3, output_dir=tmp_path,
                                              save_seconds=10.0),
        loss_fn=four_seconds_a_step)
    # 12 s after the start, 12 s after that, then the last step
    assert saved == [(3, 12.0), (6, 24.0), (8, 32.0)]
    saved.clear()
    clock.now = 0.0
    fit(nn.Linear(4, 1), Batches(), FitConfig(total_steps=8, lr=1e-3, output_dir=tmp_path,
                                              save_seconds=10.0, save_steps=2),
        loss_fn=four_seconds_a_step)
    # Every 2 steps; a step-checkpoint restarts the clock, so time never comes due
    assert [step for step, _ in saved] == [2, 4, 6, 8]


@pytest.mark.parametrize("name", SCHEDULES)
def test_each_schedule_is_transformers_own(name):
    from transformers import get_scheduler

    from cpuft.metrics import MetricLogger, MetricSink

    class Rates(MetricSink):
        def __init__(self):
            self.seen = []

        def step(self, record):
            self.seen.append(record["lr"])

    rates = Rates()
    fit(nn.Linear(4, 1), Batches(), FitConfig(total_steps=12, lr=1e-2, warmup_steps=3,
                                              lr_schedule=name),
        loss_fn=lambda m, batch: m(batch["x"]).pow(2).mean(), logger=MetricLogger([rates]))
    reference = torch.optim.SGD(nn.Linear(4, 1).parameters(), lr=1e-2)
    schedule = get_scheduler(name, reference, num_warmup_steps=3, num_training_steps=12)
    expected = []
    for _ in range(12):
        reference.step()
        schedule.step()
        expected.append(schedule.get_last_lr()[0])
    assert rates.seen == pytest.approx(expected)
    assert len(set(expected)) > 1 or name == "constant"


def test_a_logged_loss_is_the_mean_of_its_window_and_the_epoch_a_fraction():
    from cpuft.metrics import MetricLogger, MetricSink

    class Records(MetricSink):
        def __init__(self):
            self.logged = []

        def log(self, record):
            self.logged.append(dict(record))

    records = Records()
    result = fit(nn.Linear(4, 1), Batches(), FitConfig(total_steps=7, lr=1e-2, log_steps=3),
                 loss_fn=lambda m, batch: m(batch["x"]).pow(2).mean(),
                 logger=MetricLogger([records]))
    losses = result.losses
    assert [r["step"] for r in records.logged] == [3, 6, 7]
    assert [r["loss"] for r in records.logged] == pytest.approx(
        [sum(losses[0:3]) / 3, sum(losses[3:6]) / 3, losses[6]])
    assert losses[0] != losses[2]  # a window's mean is not its last step
    # Three batches an epoch: step 3 ends the first, step 7 is a third into the third
    assert [r["epoch"] for r in records.logged] == [1.0, 2.0, pytest.approx(2.3333, abs=1e-4)]


def test_batch_counts_read_any_batch_a_loader_gives():
    from transformers import BatchEncoding

    from cpuft.engine.step import batch_counts

    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    assert batch_counts(BatchEncoding({"input_ids": torch.ones(2, 3), "attention_mask": mask})) \
        == (2, 3)
    assert batch_counts((torch.ones(4, 3, 8, 8), torch.zeros(4))) == (4, 4 * 3 * 8 * 8)
    assert batch_counts({"pair": [torch.ones(5, 2), torch.zeros(5)]}) == (5, 10)
    with pytest.raises(Exception, match="holds no tensor"):
        batch_counts({"text": ["a", "b"]})


def test_a_steps_time_holds_the_loops_own_work_but_no_evaluation(monkeypatch):
    """As HF Trainer's step callbacks mark it: from the end of one step to the end of the next,
    the logging between them included; an evaluation is not training time."""
    import types

    import cpuft.engine.fit as fit_module
    from cpuft.metrics.logger import MetricLogger

    clock = types.SimpleNamespace(now=0.0)
    monkeypatch.setattr(fit_module, "time", types.SimpleNamespace(perf_counter=lambda: clock.now))

    class SlowLogger(MetricLogger):
        def step(self, record):
            clock.now += 1.0  # bookkeeping after each step

    def four_seconds_a_step(m, batch):
        clock.now += 4.0
        return m(batch["x"]).pow(2).mean()

    def scores():
        clock.now += 100.0
        return {"eval_loss": 1.0}

    result = fit(nn.Linear(4, 1), Batches(), FitConfig(total_steps=4, lr=1e-3, eval_steps=2),
                 loss_fn=four_seconds_a_step, logger=SlowLogger(), evaluate=scores)
    assert result.step_seconds == [4.0, 5.0, 5.0, 5.0]
