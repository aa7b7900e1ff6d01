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
