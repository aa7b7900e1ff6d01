"""Model patches, one module each, applied from a settled plan by ``apply.apply_speedups``:
``dropout``, ``attention``, ``first_token``, ``sparse_embeddings``, ``counted_logits``,
``fused_gelu``, ``relative_span``, ``dynamic_conv``, ``channels_last``; and ``bf16_weights``,
which the engine holds for the length of a training loop."""
