"""Click data for embedding models: a synthetic generator with a planted
model, and a reader of the Criteo display-ads text format. numpy only (no
torch); both yield ClickBatch, in chunks, so that memory does not grow with
the number of samples.

    data = SyntheticClicks(vocab_sizes=100_000, seed=1)
    for batch in data.batches(num_samples=1_000_000, batch_size=512):
        batch.dense    # float32 (512, 13)
        batch.sparse   # int64 (512, 26): feature f's id in [0, vocab_sizes[f])
        batch.labels   # float32 (512,), 0 or 1
    test = data.batch(0, 10_000, split="test")
    auc(test.labels, data.logits(test))   # the planted model's AUC

    for batch in read_criteo("day_0.tsv", batch_size=512):
        ...

The generator's labels come from a logistic model on the features: each
categorical id has a hidden weight (drawn from a hash of (seed, feature,
id), so that no table of vocabulary size is held), the dense features a
hidden weight vector; label ~ Bernoulli(sigmoid(bias + sum of the ids'
weights + dense . weights)). The AUC of those logits on a test split is what
a model can reach at best (the planted model's AUC).
"""

from dataclasses import dataclass
from pathlib import Path
from typing import IO, Iterator, List, Optional, Sequence, Tuple, Union

import numpy as np

NUM_DENSE = 13
NUM_SPARSE = 26
_SPLITS = {"train": 0, "test": 1}
_MASK64 = (1 << 64) - 1


@dataclass
class ClickBatch:
    """A batch of click samples: `dense` float32 (B, 13), `sparse` int64 (B,
    26) (one id per categorical feature, in that feature's own id space),
    `labels` float32 (B,) of 0 and 1."""

    dense: np.ndarray
    sparse: np.ndarray
    labels: np.ndarray

    def __len__(self) -> int:
        return len(self.labels)


def _split_mix(x: np.ndarray) -> np.ndarray:
    """SplitMix64's finalizer over a uint64 array (wrapping arithmetic)."""
    with np.errstate(over="ignore"):
        x = x + np.uint64(0x9E3779B97F4A7C15)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return x ^ (x >> np.uint64(31))


def auc(labels: np.ndarray, scores: np.ndarray) -> float:
    """The area under the ROC curve of `scores` for binary `labels` (ties
    counted half), by the rank-sum (Mann-Whitney) formula. nan when the
    labels are all of one class."""
    labels = np.asarray(labels).ravel() > 0.5
    scores = np.asarray(scores, dtype=np.float64).ravel()
    if labels.shape != scores.shape:
        raise ValueError(f"labels and scores differ in size: {labels.size} and {scores.size}")
    positives = int(labels.sum())
    negatives = labels.size - positives
    if positives == 0 or negatives == 0:
        return float("nan")
    order = np.argsort(scores, kind="mergesort")
    sorted_scores = scores[order]
    ranks = np.empty(scores.size, dtype=np.float64)
    # Average ranks (1-based) over runs of equal scores.
    starts = np.flatnonzero(np.r_[True, sorted_scores[1:] != sorted_scores[:-1]])
    ends = np.r_[starts[1:], scores.size]
    run_rank = (starts + ends + 1) / 2.0
    ranks[order] = np.repeat(run_rank, ends - starts)
    rank_sum = ranks[labels].sum()
    return float((rank_sum - positives * (positives + 1) / 2.0) / (positives * negatives))


class SyntheticClicks:
    """Synthetic click-through data: 26 categorical features with
    Zipf-distributed ids, 13 dense features, labels from a planted logistic
    model (see the module's docstring). Deterministic: batch `index` of a
    split is a function of (seed, split, batch_size, index) only, so workers
    can each take their own batches and a test split is the same in every
    run.

    vocab_sizes: one int for every feature, or 26 ints; ids of feature f
    are in [0, vocab_sizes[f]), id 0 the most frequent.
    zipf_exponent: s > 0 (about 1 for real click logs). An id is
    floor(X) - 1 for X drawn from the continuous power law of density
    x^-s on [1, V + 1), so P(id = k) is proportional to the integral of
    x^-s from k + 1 to k + 2: close to (k + 1)^-s for large k, flatter at
    the head (with s = 1, id 0 is log 2 / log 1.5 = 1.71 times as frequent
    as id 1, and 7.27 times id 9, where the discrete law says 2 and 10).
    sparse_scale, dense_scale, bias: the planted model's weights' scale
    (each id's hidden weight is uniform with standard deviation
    sparse_scale) and its bias (which sets the click rate).
    """

    def __init__(self, vocab_sizes: Union[int, Sequence[int]] = 100_000, *,
                 zipf_exponent: float = 1.05, seed: int = 0, sparse_scale: float = 0.4,
                 dense_scale: float = 0.3, bias: float = -1.0):
        if isinstance(vocab_sizes, (int, np.integer)):
            vocab_sizes = [int(vocab_sizes)] * NUM_SPARSE
        vocab = [int(v) for v in vocab_sizes]
        if len(vocab) != NUM_SPARSE:
            raise ValueError(f"vocab_sizes must be one int or {NUM_SPARSE}, not {len(vocab)}")
        if min(vocab) < 1 or max(vocab) > 1 << 40:
            raise ValueError(f"vocabulary sizes must be in [1, 2^40], not {vocab}")
        if not zipf_exponent > 0:
            raise ValueError(f"zipf_exponent must be > 0, not {zipf_exponent}")
        if seed < 0:
            raise ValueError(f"seed must be >= 0, not {seed}")
        self.vocab_sizes: List[int] = vocab
        self.zipf_exponent = float(zipf_exponent)
        self.seed = int(seed)
        self.sparse_scale = float(sparse_scale)
        self.dense_scale = float(dense_scale)
        self.bias = float(bias)
        rng = np.random.default_rng([self.seed, 7])
        self._dense_weights = rng.normal(0.0, 1.0, NUM_DENSE) * self.dense_scale
        self._vocab = np.array(vocab, dtype=np.float64)
        self._salt = np.uint64(_split_mix(np.array([self.seed], dtype=np.uint64))[0])

    def __repr__(self) -> str:
        sizes = set(self.vocab_sizes)
        vocab = sizes.pop() if len(sizes) == 1 else self.vocab_sizes
        return (f"SyntheticClicks(vocab_sizes={vocab}, zipf_exponent={self.zipf_exponent}, "
                f"seed={self.seed})")

    def id_weights(self, sparse: np.ndarray) -> np.ndarray:
        """The planted weight of each id of `sparse` (int, (B, 26)): uniform
        in [-sqrt(3), sqrt(3)) * sparse_scale, a hash of (seed, feature, id)."""
        sparse = np.asarray(sparse)
        features = np.arange(sparse.shape[-1], dtype=np.uint64)
        keys = sparse.astype(np.uint64) ^ (features << np.uint64(44)) ^ self._salt
        unit = (_split_mix(keys) >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))
        return (unit * 2.0 - 1.0) * np.sqrt(3.0) * self.sparse_scale

    def logits(self, batch: ClickBatch) -> np.ndarray:
        """The planted model's logit of each sample (its best score)."""
        return (self.bias + self.id_weights(batch.sparse).sum(axis=1) +
                batch.dense.astype(np.float64) @ self._dense_weights)

    def _zipf(self, rng: np.random.Generator, n: int) -> np.ndarray:
        # Inverse CDF of the continuous power law on [1, V + 1) with
        # exponent s, floored (the class docstring gives P(id = k)).
        u = rng.random((n, NUM_SPARSE))
        top = self._vocab + 1.0
        s = self.zipf_exponent
        if abs(s - 1.0) < 1e-9:
            x = np.exp(u * np.log(top))
        else:
            x = (1.0 + u * (top ** (1.0 - s) - 1.0)) ** (1.0 / (1.0 - s))
        ids = np.floor(x).astype(np.int64) - 1
        return np.minimum(np.maximum(ids, 0), np.array(self.vocab_sizes, dtype=np.int64) - 1)

    def batch(self, index: int, batch_size: int, split: str = "train") -> ClickBatch:
        """Batch `index` (>= 0) of `batch_size` samples of `split` ("train"
        or "test")."""
        if split not in _SPLITS:
            raise ValueError(f"split must be one of {', '.join(_SPLITS)}, not {split!r}")
        if index < 0 or batch_size <= 0:
            raise ValueError(f"need index >= 0 and batch_size > 0, not {index} and {batch_size}")
        rng = np.random.default_rng([self.seed, _SPLITS[split], batch_size, index])
        sparse = self._zipf(rng, batch_size)
        dense = rng.normal(0.0, 1.0, (batch_size, NUM_DENSE)).astype(np.float32)
        batch = ClickBatch(dense, sparse, np.empty(batch_size, dtype=np.float32))
        p = 1.0 / (1.0 + np.exp(-self.logits(batch)))
        batch.labels[:] = rng.random(batch_size) < p
        return batch

    def batches(self, num_samples: int, batch_size: int, split: str = "train", *,
                start: int = 0, step: int = 1) -> Iterator[ClickBatch]:
        """The batches start, start + step, ... of the num_samples //
        batch_size full batches of `split` (step = the number of workers and
        start = the rank share them out), made one at a time."""
        if step <= 0 or start < 0:
            raise ValueError(f"need start >= 0 and step > 0, not {start} and {step}")
        for index in range(start, num_samples // batch_size, step):
            yield self.batch(index, batch_size, split)


def _parse_int(field: str, line: int) -> float:
    try:
        return float(int(field))
    except ValueError:
        raise ValueError(f"line {line}: dense value {field!r} is not an integer") from None


def _parse_hex(field: str, line: int) -> int:
    try:
        value = int(field, 16)
    except ValueError:
        raise ValueError(f"line {line}: categorical value {field!r} is not hexadecimal") from None
    if value < 0 or value >= 1 << 62:
        raise ValueError(f"line {line}: categorical value {field!r} is out of range")
    return value


def read_criteo(source: Union[str, Path, IO[str]], batch_size: int, *,
                num_buckets: Optional[int] = None, drop_last: bool = False) -> Iterator[ClickBatch]:
    """Batches of the Criteo display-ads text format (Kaggle's train.txt,
    the terabyte logs' day_N): one sample a line, 40 tab-separated fields,
    the label (0 or 1), 13 integer features, 26 categorical features in
    hexadecimal; any of the 39 features may be empty (missing).

    Dense features become log(1 + max(x, 0)) (missing: 0), as DLRM does.
    A categorical value v becomes the id v + 1 (missing: 0), or with
    `num_buckets` 1 + v % (num_buckets - 1) (missing: 0), so that ids are in
    [0, num_buckets). The file is read `batch_size` lines at a time (blank
    lines skipped); the last batch may be short unless drop_last. A malformed line raises
    ValueError naming its number (1-based).
    """
    if batch_size <= 0:
        raise ValueError(f"batch_size must be > 0, not {batch_size}")
    if num_buckets is not None and num_buckets < 2:
        raise ValueError(f"num_buckets must be >= 2 or None, not {num_buckets}")
    stream = open(source, "r") if isinstance(source, (str, Path)) else source
    try:
        lines: List[Tuple[int, str]] = []
        for number, line in enumerate(stream, 1):
            if not line.strip():
                continue
            lines.append((number, line))
            if len(lines) == batch_size:
                yield _criteo_batch(lines, num_buckets)
                lines = []
        if lines and not drop_last:
            yield _criteo_batch(lines, num_buckets)
    finally:
        if stream is not source:
            stream.close()


def _criteo_batch(lines: List[Tuple[int, str]], num_buckets: Optional[int]) -> ClickBatch:
    n = len(lines)
    labels = np.empty(n, dtype=np.float32)
    dense = np.zeros((n, NUM_DENSE), dtype=np.float64)
    sparse = np.zeros((n, NUM_SPARSE), dtype=np.int64)
    for row, (number, text) in enumerate(lines):
        fields = text.rstrip("\r\n").split("\t")
        if len(fields) != 1 + NUM_DENSE + NUM_SPARSE:
            raise ValueError(f"line {number}: {len(fields)} fields, not "
                             f"{1 + NUM_DENSE + NUM_SPARSE} (label, 13 integers, 26 categorical)")
        if fields[0] not in ("0", "1"):
            raise ValueError(f"line {number}: label {fields[0]!r} is not 0 or 1")
        labels[row] = float(fields[0])
        for j, field in enumerate(fields[1:1 + NUM_DENSE]):
            if field:
                dense[row, j] = _parse_int(field, number)
        for j, field in enumerate(fields[1 + NUM_DENSE:]):
            if field:
                value = _parse_hex(field, number)
                sparse[row, j] = (value + 1 if num_buckets is None else
                                  1 + value % (num_buckets - 1))
    dense = np.log1p(np.maximum(dense, 0.0)).astype(np.float32)
    return ClickBatch(dense, sparse, labels)
