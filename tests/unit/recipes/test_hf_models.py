"""How long a sequence a model takes, read from its config and tokenizer."""

from types import SimpleNamespace

import pytest
import torch

from cpuft.recipes.hf_models import sequence_length_limit

NO_LIMIT = SimpleNamespace(model_max_length=int(1e30))  # a tokenizer that does not know its model


@pytest.mark.parametrize("config, tokenizer, limit", [
    (SimpleNamespace(model_type="bert", max_position_embeddings=512, pad_token_id=0), NO_LIMIT,
     512),
    (SimpleNamespace(model_type="mpnet", max_position_embeddings=514, pad_token_id=1), NO_LIMIT,
     512),
    (SimpleNamespace(model_type="bert", max_position_embeddings=512),
     SimpleNamespace(model_max_length=256), 256),
    (SimpleNamespace(model_type="gpt2"), NO_LIMIT, None),
])
def test_limit_from_config_and_tokenizer(config, tokenizer, limit):
    assert sequence_length_limit(config, tokenizer) == limit


def test_roberta_takes_exactly_its_limit():
    from transformers import RobertaConfig, RobertaModel

    config = RobertaConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1,
                           num_attention_heads=2, intermediate_size=32,
                           max_position_embeddings=66, pad_token_id=1)
    model = RobertaModel(config).eval()
    limit = sequence_length_limit(config, NO_LIMIT)
    assert limit == 64
    model(torch.full((1, limit), 5))  # the longest it takes
    with pytest.raises((IndexError, RuntimeError)):
        model(torch.full((1, limit + 1), 5))
