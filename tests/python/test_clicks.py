"""ductile.clicks: the synthetic click generator (deterministic by seed,
Zipf-distributed ids within each vocabulary, labels from the planted
model), the AUC, and the reader of the Criteo display-ads text format."""

import itertools
import types

import numpy as np
import pytest

from ductile.clicks import NUM_DENSE, NUM_SPARSE, ClickBatch, SyntheticClicks, auc, read_criteo


def test_a_batch_has_the_click_structure_and_ids_within_each_vocabulary():
    vocab = [10 + 7 * f for f in range(NUM_SPARSE)]
    batch = SyntheticClicks(vocab, seed=3).batch(0, 5000)
    assert isinstance(batch, ClickBatch) and len(batch) == 5000
    assert batch.dense.shape == (5000, NUM_DENSE) and batch.dense.dtype == np.float32
    assert batch.sparse.shape == (5000, NUM_SPARSE) and batch.sparse.dtype == np.int64
    assert batch.labels.shape == (5000,) and batch.labels.dtype == np.float32
    assert set(np.unique(batch.labels)) == {0.0, 1.0}
    assert (batch.sparse >= 0).all() and (batch.sparse < np.array(vocab)).all()
    # Small vocabularies are covered whole.
    assert len(np.unique(batch.sparse[:, 0])) == vocab[0]


def test_batches_are_a_function_of_seed_split_size_and_index_only():
    a, b = SyntheticClicks(1000, seed=5), SyntheticClicks(1000, seed=5)
    first, again = a.batch(3, 64), b.batch(3, 64)
    for field in ("dense", "sparse", "labels"):
        np.testing.assert_array_equal(getattr(first, field), getattr(again, field))
    for other in (a.batch(4, 64), a.batch(3, 64, split="test"), SyntheticClicks(1000, seed=6).batch(3, 64)):
        assert not np.array_equal(first.sparse, other.sparse)


def test_ids_follow_a_zipf_law():
    batch = SyntheticClicks(100_000, zipf_exponent=1.0, seed=1).batch(0, 20000)
    counts = np.bincount(batch.sparse.ravel(), minlength=100_000)
    # The floored continuous law: id 0 is log 2 / log 1.5 = 1.71 times id 1
    # and log 2 / log 1.1 = 7.27 times id 9 (26 x 20000 draws: within a few
    # percent).
    assert counts.argmax() == 0
    assert 1.6 < counts[0] / counts[1] < 1.85
    assert 6.6 < counts[0] / counts[9] < 8.0
    # Over a vocabulary of 10^5, a batch touches a small part of it.
    assert len(np.unique(batch.sparse[:, 0])) < 20000


def test_labels_come_from_the_planted_model():
    data = SyntheticClicks(1000, seed=2)
    test = data.batch(0, 20000, split="test")
    planted = auc(test.labels, data.logits(test))
    assert planted > 0.8
    # Without the ids' weights, or with the labels of another split, the
    # score is worse or chance.
    dense_only = test.dense.astype(np.float64) @ data._dense_weights
    assert auc(test.labels, dense_only) < planted - 0.1
    other = data.batch(1, 20000, split="test")
    assert abs(auc(other.labels, data.logits(test)) - 0.5) < 0.03
    # The weights are a function of (seed, feature, id).
    ids = np.array([[1] * NUM_SPARSE, [2] * NUM_SPARSE])
    np.testing.assert_array_equal(data.id_weights(ids), SyntheticClicks(50, seed=2).id_weights(ids))
    assert not np.array_equal(data.id_weights(ids)[0], data.id_weights(ids)[1])


def test_workers_share_out_the_batches_one_at_a_time():
    data = SyntheticClicks(100, seed=0)
    stream = data.batches(1000, 100, start=1, step=3)
    assert isinstance(stream, types.GeneratorType)
    taken = [b.sparse for b in stream]
    assert len(taken) == 3  # batches 1, 4, 7 of 10
    np.testing.assert_array_equal(taken[1], data.batch(4, 100).sparse)


@pytest.mark.parametrize("kwargs", [{"vocab_sizes": 0}, {"vocab_sizes": [5] * 3},
                                    {"zipf_exponent": 0}, {"seed": -1}])
def test_bad_generator_options_raise(kwargs):
    with pytest.raises(ValueError):
        SyntheticClicks(**kwargs)
    with pytest.raises(ValueError):
        SyntheticClicks(10).batch(0, 10, split="validation")


def test_auc_counts_ordered_pairs_ties_half():
    assert auc([0, 0, 1, 1], [0.1, 0.2, 0.3, 0.4]) == 1.0
    assert auc([1, 1, 0, 0], [0.1, 0.2, 0.3, 0.4]) == 0.0
    assert auc([0, 1, 0, 1], [0.5, 0.5, 0.5, 0.5]) == 0.5
    assert np.isnan(auc([1, 1], [0.2, 0.3]))
    rng = np.random.default_rng(0)
    labels = rng.random(300) < 0.3
    scores = np.round(rng.random(300), 1)  # many ties
    pairs = [(s, t) for s, t in itertools.product(scores[labels], scores[~labels])]
    expected = np.mean([1.0 if s > t else 0.5 if s == t else 0.0 for s, t in pairs])
    assert auc(labels, scores) == pytest.approx(expected, abs=1e-12)


def criteo_line(label, ints, cats):
    return "\t".join([str(label)] + [("" if v is None else str(v)) for v in ints] +
                     [("" if c is None else c) for c in cats]) + "\n"


def write_criteo(path):
    lines = []
    for i in range(5):
        ints = [i, -1, None] + [10 * i + j for j in range(10)]
        cats = [f"{(i + 1) * 0x10 + j:08x}" for j in range(NUM_SPARSE)]
        cats[4] = None
        lines.append(criteo_line(i % 2, ints, cats))
    lines.insert(2, "\n")  # a blank line is skipped
    path.write_text("".join(lines))


def test_the_criteo_reader_yields_click_batches_with_missing_values_as_zero(tmp_path):
    path = tmp_path / "day_0.tsv"
    write_criteo(path)
    batches = list(read_criteo(path, batch_size=2))
    assert [len(b) for b in batches] == [2, 2, 1]
    assert [len(b) for b in read_criteo(str(path), batch_size=2, drop_last=True)] == [2, 2]
    first = batches[0]
    assert first.dense.dtype == np.float32 and first.dense.shape == (2, NUM_DENSE)
    np.testing.assert_array_equal(first.labels, [0, 1])
    # log(1 + max(x, 0)); -1 and missing become 0.
    np.testing.assert_allclose(first.dense[1, :4], np.log1p([1, 0, 0, 10]), rtol=1e-6)
    # Categorical: v + 1, missing 0.
    assert first.sparse.dtype == np.int64
    assert first.sparse[1, 0] == 0x20 + 1 and first.sparse[1, 25] == 0x20 + 25 + 1
    assert (first.sparse[:, 4] == 0).all()
    with open(path) as stream:  # an open file too
        hashed = next(read_criteo(stream, batch_size=5, num_buckets=7))
    assert len(hashed) == 5 and hashed.sparse.min() >= 0 and hashed.sparse.max() < 7
    assert hashed.sparse[1, 0] == 1 + 0x20 % 6


@pytest.mark.parametrize("line, message", [
    (criteo_line(1, [1] * 12, ["a"] * NUM_SPARSE), "line 2: 39 fields"),
    (criteo_line(2, [1] * 13, ["a"] * NUM_SPARSE), "line 2: label '2'"),
    (criteo_line(1, [1] * 12 + ["x"], ["a"] * NUM_SPARSE), "line 2: dense value 'x'"),
    (criteo_line(1, [1] * 13, ["zz"] + ["a"] * 25), "line 2: categorical value 'zz'"),
], ids=["fields", "label", "dense", "categorical"])
def test_a_malformed_criteo_line_raises_naming_it(tmp_path, line, message):
    path = tmp_path / "bad.tsv"
    path.write_text(criteo_line(0, [1] * 13, ["a"] * NUM_SPARSE) + line)
    with pytest.raises(ValueError, match=message):
        list(read_criteo(path, batch_size=8))
