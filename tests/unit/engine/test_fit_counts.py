import torch
from torch import nn

from cpuft.engine.fit import FitConfig, fit

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
                        lambda out, step, state: saved.append((step, clock.now)))

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
