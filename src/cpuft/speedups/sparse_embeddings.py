"""Word-embedding gradients as sparse rows: only the rows a batch uses are updated (by the lazy
AdamW of cpuft.optim) and, across ranks, sent. Off unless asked for: a lazy update is not
AdamW's."""

from __future__ import annotations

from torch import nn

from cpuft.config import TrainConfig
from cpuft.speedplan.speed_plan import Decision
from cpuft.speedups.registry import PatchSpeedUp, register
from cpuft.topology import Topology

NOT_ADAMW = ("off: a lazy update is not AdamW's (unused rows keep their moments and skip weight "
             "decay); --sparse-embeddings turns it on")


def make_embeddings_sparse(model: nn.Module) -> str:
    """Have the word embedding give sparse gradients; the reason it cannot, or ''."""
    get_input = getattr(model, "get_input_embeddings", None)
    embedding = get_input() if get_input else None
    if not isinstance(embedding, nn.Embedding):
        return "the model has no nn.Embedding word embedding"
    get_output = getattr(model, "get_output_embeddings", None)
    output = get_output() if get_output else None
    if output is not None and getattr(output, "weight", None) is embedding.weight:
        # Tied to the output layer, the weight's gradient is dense anyway.
        return "the word embedding is tied to the output layer"
    if embedding.max_norm is not None:
        return "the word embedding renormalises rows (max_norm)"
    embedding.sparse = True
    return ""


class SparseEmbeddings(PatchSpeedUp):
    def decide(self, cfg: TrainConfig, topo: Topology) -> Decision:
        return Decision(True, "requested: a lazy AdamW on the rows a batch uses") \
            if cfg.speedups.sparse_embeddings else Decision(False, NOT_ADAMW)


register(SparseEmbeddings(
    "sparse_embeddings", make_embeddings_sparse,
    own_loops="off in a loop of your own: torch's optimizers take dense gradients"))
