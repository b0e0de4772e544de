"""sodm_spark.core.categories against scikit-learn's encoders: one-hot as OneHotEncoder
(unknown values ignored), target encoding as TargetEncoder with the same smoothing and the
same folds, unseen values counted, the encoding through its JSON unchanged."""
import numpy as np
import pytest
from sklearn.preprocessing import OneHotEncoder, TargetEncoder

from sodm_spark.core.categories import (FOLDS, ONE_HOT, ONE_HOT_WEIGHT, SMOOTHING, TARGET,
                                        encoding_from_json, encoding_to_json, fit_column,
                                        fit_encoding, training_folds)


def _values(n, levels, seed):
    rng = np.random.default_rng(seed)
    names = np.array([f"L{k:03d}" for k in range(levels)], dtype=object)
    return names[rng.integers(0, levels, size=n)], rng


def test_a_column_of_few_levels_is_one_hot_as_scikit_learn_encodes_it():
    values, rng = _values(300, 5, 1)
    y = rng.integers(0, 2, size=300)
    column, encoded = fit_column("carrier", values, y, [0, 1])
    assert column.kind == ONE_HOT and column.features[0] == "carrier=L000"
    reference = OneHotEncoder(handle_unknown="ignore", sparse_output=False)
    np.testing.assert_array_equal(encoded, reference.fit_transform(values[:, None]))
    new = np.array(["L004", "ZZZ", "L000", None], dtype=object)
    codes = column.codes(new)
    np.testing.assert_array_equal(codes, [4, -1, 0, -1])
    np.testing.assert_array_equal(column.encode(codes), reference.transform(
        np.array(["L004", "ZZZ", "L000", "None"], dtype=object)[:, None]))


@pytest.mark.parametrize("classes", [[0, 1], [0, 1, 2]])
def test_a_column_of_many_levels_is_target_encoded_as_scikit_learn_encodes_it(classes):
    values, rng = _values(2000, 40, 2)
    y = np.asarray(classes)[rng.integers(0, len(classes), size=2000)]
    ids = np.arange(2000) + (7 << 40)
    folds = training_folds(ids, seed=3)
    column, out_of_fold = fit_column("origin", values, y, classes, folds)
    assert column.kind == TARGET and len(column.features) == (1 if len(classes) == 2 else 3)
    splits = [(np.flatnonzero(folds != f), np.flatnonzero(folds == f)) for f in range(FOLDS)]
    reference = TargetEncoder(smooth=SMOOTHING, cv=splits,
                              target_type="binary" if len(classes) == 2 else "multiclass")
    np.testing.assert_allclose(out_of_fold, reference.fit_transform(values[:, None], y),
                               rtol=1e-12)
    # new rows by the whole table; an unseen level by the prior
    new = np.array(["L003", "nowhere", "L039"], dtype=object)
    codes = column.codes(new)
    assert codes[1] == -1
    np.testing.assert_allclose(column.encode(codes), reference.transform(new[:, None]),
                               rtol=1e-12)


def test_a_table_encodes_its_rows_counts_the_unseen_and_survives_its_json():
    carriers, rng = _values(500, 4, 5)
    airports, _ = _values(500, 30, 6)
    numeric = rng.standard_normal((500, 2))
    y = rng.integers(0, 2, size=500)
    encoding, X = fit_encoding(["distance", "hour"], numeric, {"carrier": carriers,
                                                               "dest": airports}, y, [0, 1])
    assert encoding.input_columns == ("distance", "hour", "carrier", "dest")
    assert encoding.feature_names == ("distance", "hour", "carrier=L000", "carrier=L001",
                                      "carrier=L002", "carrier=L003", "dest:1")
    assert X.shape == (500, 7)
    np.testing.assert_array_equal(X[:, :2], numeric)
    again = encoding_from_json(encoding_to_json(encoding))
    assert again.feature_names == encoding.feature_names
    new_carriers = np.array(["L001", "XX", "XX"], dtype=object)
    new_dest = np.array(["L000", "L029", "??"], dtype=object)
    scored = again.encode(numeric[:3], {"carrier": new_carriers, "dest": new_dest})
    assert scored.unseen == {"carrier": 2, "dest": 1}
    np.testing.assert_array_equal(scored.X[:, 2:6], [[0, 1, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0]])
    dest = encoding.columns[1]
    np.testing.assert_allclose(scored.X[:, 6], [dest.table[0, 0], dest.table[29, 0],
                                                dest.prior[0]])


def test_two_categories_lie_as_far_apart_as_a_numeric_range_after_the_weights():
    values = np.array(["a", "b", "c"] * 10, dtype=object)
    encoding, X = fit_encoding(["x"], np.linspace(0, 1, 30)[:, None], {"c": values},
                               np.arange(30) % 2, [0, 1])
    weighted = X * encoding.feature_weights()
    assert encoding.feature_weights()[1] == ONE_HOT_WEIGHT
    np.testing.assert_allclose(np.linalg.norm(weighted[0, 1:] - weighted[1, 1:]), 1.0)
    np.testing.assert_allclose(abs(weighted[-1, 0] - weighted[0, 0]), 1.0)


def test_folds_come_from_the_row_ids_and_the_seed_alone():
    ids = np.arange(10_000, dtype=np.int64) + (3 << 40)
    folds = training_folds(ids, seed=11)
    np.testing.assert_array_equal(folds, training_folds(ids.copy(), seed=11))
    np.testing.assert_array_equal(folds[5000:], training_folds(ids[5000:], seed=11))
    assert not np.array_equal(folds, training_folds(ids, seed=12))
    counts = np.bincount(folds, minlength=FOLDS)
    assert counts.min() > 1800 and counts.max() < 2200


def test_a_malformed_encoding_is_refused_naming_the_column():
    document = {"numeric": [], "columns": [{"name": "c", "levels": ["b", "a"],
                                            "kind": ONE_HOT}]}
    with pytest.raises(ValueError, match="'c' are not sorted"):
        encoding_from_json(document)


def test_counts_of_disjoint_rows_add_up_to_the_counts_of_all():
    from sodm_spark.core.categories import level_counts

    values, rng = _values(900, 30, 8)
    y = rng.integers(0, 3, size=900)
    folds = training_folds(np.arange(900), seed=1)
    whole = level_counts(values, y, folds)
    halves = level_counts(values[:300], y[:300], folds[:300]).merged(
        level_counts(values[300:], y[300:], folds[300:]))
    assert halves.levels == whole.levels and halves.labels == whole.labels == (0.0, 1.0, 2.0)
    np.testing.assert_array_equal(halves.counts, whole.counts)
    assert whole.counts.sum() == 900
    # a part that met fewer levels and labels still adds in the right cells
    few = level_counts(values[:5], np.zeros(5), folds[:5])
    assert len(few.levels) < 30 and few.labels == (0.0,)
    merged = few.merged(level_counts(values[5:], y[5:], folds[5:]))
    np.testing.assert_array_equal(merged.counts, level_counts(
        values, np.concatenate([np.zeros(5), y[5:]]), folds).counts)
