"""Task metrics: accuracy, F1, Matthews correlation, Pearson and Spearman."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def score(metrics: Sequence[str], predictions: np.ndarray, labels: np.ndarray) -> dict[str, float]:
    from scipy.stats import pearsonr, spearmanr
    from sklearn.metrics import accuracy_score, f1_score, matthews_corrcoef

    out: dict[str, float] = {}
    for name in metrics:
        if name == "accuracy":
            out[name] = float(accuracy_score(labels, predictions))
        elif name == "f1":
            binary = len(np.unique(np.concatenate([labels, predictions]))) <= 2
            out[name] = float(f1_score(labels, predictions,
                                       average="binary" if binary else "macro"))
        elif name == "matthews":
            out[name] = float(matthews_corrcoef(labels, predictions))
        elif name == "pearson":
            out[name] = float(pearsonr(predictions, labels)[0])
        elif name == "spearman":
            out[name] = float(spearmanr(predictions, labels)[0])
        else:
            raise ValueError(f"unknown metric {name}")
    return out
