import torch

from cpuft.data.batching import Collator, TokenBatches, epoch_batches
from cpuft.data.prepare import Encoded


def test_batches_cover_every_sample_once_and_repeat_per_seed():
    lengths = [(i * 7) % 23 + 1 for i in range(101)]
    a = epoch_batches(lengths, 8, seed=1, epoch=0)
    assert sorted(i for b in a for i in b) == list(range(101))
    assert a == epoch_batches(lengths, 8, seed=1, epoch=0)
    assert a != epoch_batches(lengths, 8, seed=1, epoch=1)


def test_length_grouping_cuts_padding():
    lengths = [(i * 37) % 120 + 4 for i in range(800)]

    def padded(batches):
        return sum(len(b) * max(lengths[i] for i in b) for b in batches)

    grouped = padded(epoch_batches(lengths, 16, seed=0, epoch=0))
    random_ = padded(epoch_batches(lengths, 16, seed=0, epoch=0, group_by_length=False))
    assert grouped < 0.75 * random_


def test_collator_pads_to_longest_and_masks():
    data = Encoded(input_ids=[[5, 6, 7], [8]], labels=[1, 0], token_type_ids=[[0, 0, 0], [0]])
    batch = Collator(pad_id=0)(data, [0, 1])
    assert batch["input_ids"].tolist() == [[5, 6, 7], [8, 0, 0]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1], [1, 0, 0]]
    assert batch["token_type_ids"].shape == (2, 3)
    assert batch["labels"].dtype == torch.long


def test_collator_fixed_length_and_regression_labels():
    data = Encoded(input_ids=[[5, 6]], labels=[0.5])
    batch = Collator(pad_id=9, fixed_length=6)(data, [0])
    assert batch["input_ids"].tolist() == [[5, 6, 9, 9, 9, 9]]
    assert batch["labels"].dtype == torch.float32 and "token_type_ids" not in batch


def test_token_batches_resume_position():
    data = Encoded(input_ids=[[1] * (i % 5 + 1) for i in range(20)], labels=[0] * 20)
    src = TokenBatches(data, Collator(pad_id=0), batch_size=4, seed=3)
    full = [b["input_ids"].tolist() for b in src.iterate(0)]
    assert [b["input_ids"].tolist() for b in src.iterate(0, start=2)] == full[2:]
    assert src.num_batches(0) == 5


def test_the_padded_length_is_the_median_batchs_width():
    data = Encoded(input_ids=[[1] * (i % 5 + 1) for i in range(20)], labels=[0] * 20)
    src = TokenBatches(data, Collator(pad_id=0), batch_size=4, seed=3)
    widths = sorted(b["input_ids"].shape[1] for b in src.iterate(0))
    assert src.padded_length() == widths[len(widths) // 2]
    fixed = TokenBatches(data, Collator(pad_id=0, fixed_length=64), batch_size=4, seed=3)
    assert fixed.padded_length() == 64
