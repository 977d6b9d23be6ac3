"""Scores shared by the suites: ranking (recall@k, reciprocal rank), answer overlap (token F1),
verdicts (accuracy, precision, recall) and averages per category."""

from __future__ import annotations

import re
import string
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = str.maketrans("", "", string.punctuation)


def recall_at(ranked: Sequence[str], relevant: set[str], k: int) -> float:
    """Share of the relevant items found in the top k."""
    if not relevant:
        return 0.0
    return len(relevant.intersection(ranked[:k])) / len(relevant)


def reciprocal_rank(ranked: Sequence[str], relevant: set[str]) -> float:
    """1 / rank of the first relevant item, 0 if none is ranked."""
    for rank, item in enumerate(ranked, start=1):
        if item in relevant:
            return 1.0 / rank
    return 0.0


def normalize_answer(text: str) -> str:
    """SQuAD's normalization: lower case, no punctuation, articles or extra spaces."""
    text = text.lower().translate(_PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def token_f1(prediction: str, gold: str) -> float:
    """Word overlap of an answer with the gold answer (SQuAD's F1, the one LoCoMo reports)."""
    predicted = normalize_answer(prediction).split()
    expected = normalize_answer(gold).split()
    if not predicted or not expected:
        return float(predicted == expected)
    common = sum((Counter(predicted) & Counter(expected)).values())
    if not common:
        return 0.0
    precision = common / len(predicted)
    recall = common / len(expected)
    return 2 * precision * recall / (precision + recall)


def verdict_scores(pairs: Iterable[tuple[bool, bool]]) -> dict[str, float]:
    """Accuracy, precision and recall of yes/no verdicts, from (predicted, expected) pairs;
    "yes" is the positive class."""
    counts = Counter((bool(p), bool(e)) for p, e in pairs)
    tp, fp = counts[(True, True)], counts[(True, False)]
    fn, tn = counts[(False, True)], counts[(False, False)]
    total = tp + fp + fn + tn
    return {
        "n": total,
        "accuracy": (tp + tn) / total if total else 0.0,
        "precision": tp / (tp + fp) if tp + fp else 0.0,
        "recall": tp / (tp + fn) if tp + fn else 0.0,
    }


def mean_by(rows: Iterable[tuple[str, dict[str, float]]]) -> dict[str, dict[str, float]]:
    """Per group and overall ("all"): the mean of every score, and the count `n`."""
    groups: dict[str, list[dict[str, float]]] = defaultdict(list)
    for group, scores in rows:
        groups[group].append(scores)
        groups["all"].append(scores)
    return {
        group: {"n": len(items)}
        | {key: sum(s[key] for s in items) / len(items) for key in items[0]}
        for group, items in sorted(groups.items(), key=lambda item: item[0] == "all")
    }


def percentile(values: Sequence[float], share: float) -> float:
    """Nearest-rank percentile (share in 0..1); 0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(share * len(ordered) + 0.5) - 1))
    return ordered[index]


def latency_summary(seconds: Sequence[float]) -> dict[str, float]:
    """p50, p95, mean and max of a list of durations."""
    return {
        "p50": percentile(seconds, 0.5),
        "p95": percentile(seconds, 0.95),
        "mean": sum(seconds) / len(seconds) if seconds else 0.0,
        "max": max(seconds, default=0.0),
    }
