"""Word-embedding gradients as the rows a batch used, not a dense table that is zero elsewhere.

``embedding_rows`` (on by default) keeps AdamW's update: cpuft.optim's row kernel steps the
whole table from those rows, so no dense gradient of vocabulary x width is written, zeroed
and read at every step (on bert-base, 94 MB). ``sparse_embeddings`` (off unless asked for)
updates the rows used alone (a lazy AdamW): faster still, but not AdamW's update. Either way
only the rows are sent across ranks.
"""

from __future__ import annotations

from torch import nn

from cpuft.config import TrainConfig
from cpuft.speedplan.speed_plan import Decision
from cpuft.speedups.registry import PatchContext, PatchSpeedUp, register
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
    if not embedding.weight.requires_grad:
        return "the word embedding is frozen"
    embedding.sparse = True
    return ""


class SparseEmbeddings(PatchSpeedUp):
    def decide(self, cfg: TrainConfig, topo: Topology) -> Decision:
        return Decision(True, "requested: a lazy AdamW on the rows a batch uses") \
            if cfg.speedups.sparse_embeddings else Decision(False, NOT_ADAMW)


register(SparseEmbeddings(
    "sparse_embeddings", make_embeddings_sparse,
    own_loops="off in a loop of your own: torch's optimizers take dense gradients"))


class EmbeddingRows(PatchSpeedUp):
    def decide(self, cfg: TrainConfig, topo: Topology) -> Decision:
        if cfg.speedups.sparse_embeddings:
            return Decision(False, "--sparse-embeddings updates the rows lazily instead")
        if not cfg.speedups.embedding_rows:
            return Decision(False, "requested")
        if not cfg.speedups.fused_optimizer:
            return Decision(False, "its step is a fused kernel: --no-fused-optimizer")
        return Decision(True, "on by default: AdamW's step on the whole table, from the rows "
                              "a batch used")

    def apply(self, model: nn.Module, decision: Decision, ctx: PatchContext) -> Decision:
        from cpuft.kernels.adamw import adamw_rows

        kernel, note = adamw_rows()
        if kernel is None:
            return Decision(False, f"no row kernel ({note})")
        return super().apply(model, decision, ctx)


register(EmbeddingRows(
    "embedding_rows", make_embeddings_sparse,
    own_loops="off in a loop of your own: torch's optimizers take dense gradients"))
