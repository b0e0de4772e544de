"""A :class:`~sodm_spark.models.expansion.KernelExpansion` as an ONNX graph, so that it scores
rows outside Python: onnxruntime from Java, C#, C++ or a browser (docs/design.md §5, §7).

The graph takes raw rows, ``features`` (batch, features): float64, or float32 with
``input_type="float"`` (cast to float64 first); all its arithmetic is float64. The input is
positional, as every serving runtime binds one tensor: its j-th value is the model's j-th
feature. A model trained on named columns says which, so that serving code can put its columns
in that order rather than score them in another one silently: the ONNX model's
``metadata_props`` hold ``feature_names`` and ``feature_types`` (JSON lists, in the input's
order; the types as the training data had them, NumPy's or Spark SQL's names), and the input's
``doc_string`` names the columns in order (:func:`input_doc`). A model without names has neither
key, and its input's ``doc_string`` says the columns come in the training data's order. A model
that encodes string columns (``KernelExpansion.categories``) takes each of them as an input of
its own, named as the column, and its numeric columns as ``features``
(:mod:`.onnx_inputs`); ``metadata_props`` then hold the encoding too (``categories``).

* the input map (:class:`~sodm_spark.models.expansion.InputMap`): min-max scaling
  ``(x − offset) · scale``, max-abs scaling of some columns, and a projection folded with the
  scaling into one product ``x (s V) − (o·s + c) V``, as ``InputMap.__call__`` does;
* the kernel against the support vectors, each kernel's own graph
  (:meth:`Kernel.onnx_sums <sodm_spark.core.kernels.Kernel.onnx_sums>`), as matrix products as
  :mod:`sodm_spark.core.kernels` builds its blocks: linear as one weight matrix ``Zᵀα``; poly
  ``(γ xZᵀ + coef0)^degree`` by repeated products; rbf ``exp(2γ xZᵀ − γ‖z‖² − γ‖x‖²)`` and
  matern ``(1 + t) exp(−t)``, ``t² = 3γ‖x − z‖²``, from one product of ``[x, 1, ‖x‖²]``;
  laplacian ``exp(−γ Σ_j |x_j − z_j|)`` in a ``Scan`` over blocks of support vectors (L1
  distances have no product form; a step's scratch is a fixed number of values a row,
  whatever the model's size);
* the kernel offset c (k + c adds c·Σ_i α_i to each output) folded into the intercept.

Outputs: ``scores``, the decision values shaped as ``decision_function``'s ((batch,) for one
output, (batch, K) for K one-vs-rest outputs); ``label`` (classifiers: ``classes[1]`` where
f > 0 else ``classes[0]``; for K ≥ 2 the class of the first largest score, as numpy's argmax);
``probabilities`` (batch, classes) when the model is calibrated, as its calibration's
``probabilities`` (:mod:`.calibration`, which cites the papers: Platt's sigmoids, or isotonic
maps read as ``numpy.interp`` reads them; one-vs-rest values normalized for 3+ classes). Any
other calibration is refused in one line; ``probabilities=False`` leaves them out.

Why standard operators and not ONNX-ML's ``SVMClassifier`` / ``SVMRegressor``: onnxruntime runs
those in float32 (on a 3,000-vector rbf model of 50 features, 2e-6 of the largest |f| off
``decision_function``; a compressed model's coefficients cancel, so it loses more), one output
per operator (K one-vs-rest outputs would compute the kernel K times; the products compute it
once), without the laplacian kernel or an input map, and slower: that model's 10,000 rows took
``SVMRegressor`` 0.43-0.75 s and this graph 0.07-0.19 s (docs/jobs.md, "Exporting to ONNX").

Precision (tests/test_onnx_export.py, 10,000 rows a model, the largest |Δf| of an output over
its largest |f|): 4e-16 to 9e-15 for every kernel, input map and class count there; the
check's bound is 1e-4. The support vectors are stored in float64: a graph of more than
:data:`MAX_MODEL_BYTES` is refused with the advice to compress the model
(:meth:`KernelExpansion.compress`, the training job's ``--max-sv``), as are CSR support vectors
of more than :data:`MAX_DENSE_CELLS` numbers once dense.
"""
from __future__ import annotations

import json

import numpy as np
import scipy.sparse

from ..core.categories import encoding_to_json
from ..data.storage import replace_file
from .expansion import KernelExpansion
from .onnx_inputs import graph_inputs

#: The operator set and IR version of the graph, old enough for the runtimes deployed: the
#: graphs of tests/test_onnx_export.py give the same outputs in onnxruntime 1.16.3 and 1.32.0.
OPSET, IR_VERSION = 17, 8
INPUT_TYPES = ("double", "float")
#: Largest dense copy of CSR support vectors (support vectors × features) the export makes:
#: 512 MiB of float64, so that a sparse model's graph stays well inside one file's 2 GiB.
MAX_DENSE_CELLS = 2 ** 26
#: Largest graph (its arrays' bytes) written: protobuf refuses messages of 2 GiB or more.
MAX_MODEL_BYTES = 1_900_000_000
#: The calibrations (``to_dict()["method"]``) whose probabilities the graph computes.
CALIBRATIONS = ("sigmoid", "isotonic")
#: What to run when onnx is missing.
INSTALL_HINT = 'pip install "sodm-spark[onnx]"'


def import_onnx():
    """The onnx package, or an ImportError saying how to install it."""
    try:
        import onnx
    except ImportError:
        raise ImportError(f"ONNX export needs the onnx package, which is not installed: "
                          f"{INSTALL_HINT} (or pip install onnx onnxruntime).") from None
    return onnx


class _Graph:
    """The nodes and constant arrays of the graph being built, each given a unique name."""

    def __init__(self, onnx):
        self.onnx, self.nodes, self.arrays, self.count = onnx, [], [], 0

    def constant(self, name: str, array) -> str:
        array = np.asarray(array)
        if array.dtype.kind == "U":  # onnx writes strings from Python objects
            array = array.astype(object)
        self.arrays.append(self.onnx.numpy_helper.from_array(array, name))
        return name

    def op(self, op_type: str, *inputs: str, output: str | None = None, **attributes) -> str:
        self.count += 1
        output = output or f"{op_type.lower()}_{self.count}"
        self.nodes.append(self.onnx.helper.make_node(
            op_type, list(inputs), [output], name=f"{op_type}_{self.count}", **attributes))
        return output

    def axes(self, *values: int) -> str:
        self.count += 1
        return self.constant(f"axes_{self.count}", np.asarray(values, dtype=np.int64))

    def power(self, base: str, degree: int) -> str:
        """``base ** degree`` elementwise by squaring and multiplying (exact integer powers, as
        numpy's ``power`` of float64 with an integer exponent, for any sign of the base)."""
        result, square = None, base
        while degree:
            if degree & 1:
                result = square if result is None else self.op("Mul", result, square)
            degree >>= 1
            if degree:
                square = self.op("Mul", square, square)
        assert result is not None  # a degree >= 1 (Kernel.create)
        return result

    def nested(self) -> "_Graph":
        """An empty graph for the body of a control-flow node (``Scan``), naming its nodes
        after this graph's (:meth:`absorb` takes the count back once it is built)."""
        body = _Graph(self.onnx)
        body.count = self.count
        return body

    def absorb(self, body: "_Graph") -> None:
        """Name this graph's next nodes after those of ``body`` (:meth:`nested`)."""
        self.count = body.count


def _dense_support_vectors(model: KernelExpansion) -> np.ndarray:
    """The support vectors as a float64 array; CSR ones densified when small enough."""
    vectors = model.support_vectors
    if scipy.sparse.issparse(vectors):
        cells = int(vectors.shape[0]) * int(vectors.shape[1])
        if cells > MAX_DENSE_CELLS:
            raise ValueError(
                f"the model's support vectors are sparse (CSR), {vectors.shape[0]:,} × "
                f"{vectors.shape[1]:,}: densified for the graph they would be {cells:,} "
                f"numbers, above the {MAX_DENSE_CELLS:,} the export writes; compress the model "
                "to fewer points first (KernelExpansion.compress, the training job's --max-sv).")
        vectors = vectors.toarray()
    return np.asarray(vectors, dtype=np.float64)


def _full_width_scale(input_map, width: int) -> np.ndarray | None:
    """The scaling's factor of every raw column (1 outside ``columns`` for max-abs scaling)."""
    if input_map.scale is None:
        return None
    scale = np.asarray(input_map.scale, dtype=np.float64)
    if input_map.columns is None:
        return scale
    full = np.ones(width)
    full[np.asarray(input_map.columns, dtype=np.int64)] = scale
    return full


def _kernel_inputs(graph: _Graph, model: KernelExpansion, rows: str) -> str:
    """Raw rows → the kernel's inputs (:class:`~sodm_spark.models.expansion.InputMap`)."""
    input_map = model.input_map
    scale = _full_width_scale(input_map, model.n_features_in)
    # max-abs scaling of some columns has no offset (scale_rows ignores one)
    offset = None if input_map.columns is not None or input_map.offset is None \
        else np.asarray(input_map.offset, dtype=np.float64)
    if input_map.components is not None:
        components = np.asarray(input_map.components, dtype=np.float64)
        factor = np.ones(components.shape[0]) if scale is None else scale
        shift = (0.0 if offset is None else offset * factor) + \
            (0.0 if input_map.center is None else np.asarray(input_map.center, np.float64))
        projected = graph.op("MatMul", rows,
                             graph.constant("input_map_matrix", factor[:, None] * components))
        return graph.op("Sub", projected, graph.constant(
            "input_map_shift", np.atleast_1d(np.asarray(shift) @ components)[None, :]))
    if scale is None:
        return rows
    if offset is not None:
        rows = graph.op("Sub", rows, graph.constant("feature_offset", offset[None, :]))
    return graph.op("Mul", rows, graph.constant("feature_scale", scale[None, :]))


def _kernel_sums(graph: _Graph, kernel, inputs: str, vectors, coef) -> str:
    """Σ_i α_i k(x, z_i) for every output, (batch, outputs), without the offset."""
    if vectors.shape[0] == 0:  # no support vectors: f is the intercept
        return graph.op("MatMul", inputs, graph.constant(
            "zero_weights", np.zeros((vectors.shape[1], coef.shape[1]))))
    return kernel.onnx_sums(graph, inputs, vectors, coef)


def _classes_tensor(onnx, classes: np.ndarray):
    """(the classes as an array ONNX stores, its element type)."""
    kinds = {"i": (np.int64, onnx.TensorProto.INT64), "u": (np.int64, onnx.TensorProto.INT64),
             "f": (np.float64, onnx.TensorProto.DOUBLE), "b": (np.bool_, onnx.TensorProto.BOOL)}
    dtype, element = kinds.get(classes.dtype.kind, (str, onnx.TensorProto.STRING))
    return classes.astype(dtype), element


def _sigmoid_values(graph: _Graph, values: str, calibration: dict) -> str:
    """Platt's sigmoids of the score columns ``values``, as ``SigmoidCalibration``."""
    slopes = np.asarray(calibration["slopes"], dtype=np.float64)
    intercepts = np.asarray(calibration["intercepts"], dtype=np.float64)
    # expit(−(A f + B)), with −(A f + B) written as (−A) f − B: the same float64 number
    return graph.op("Sigmoid", graph.op("Sub", graph.op(
        "Mul", values, graph.constant("calibration_minus_slopes", -slopes[None, :])),
        graph.constant("calibration_intercepts", intercepts[None, :])))


def _isotonic_values(graph: _Graph, values: str, calibration: dict) -> str:
    """Each score column through its isotonic map, as ``numpy.interp`` reads it (the end
    values outside the thresholds): the column clipped to the map's range, its segment j the
    number of thresholds at or below it less one (at most the last segment), then
    ``p_j + slope_j · (f − x_j)``, and the last value from the last threshold on. The count
    compares every row with every threshold: a (batch, thresholds) block per map."""
    columns = []
    maps = list(zip(calibration["thresholds"], calibration["probabilities"]))
    for k, (thresholds, probabilities) in enumerate(maps):
        x = np.asarray(thresholds, dtype=np.float64)
        p = np.asarray(probabilities, dtype=np.float64)
        f = values if len(maps) == 1 else graph.op(
            "Slice", values, graph.axes(k), graph.axes(k + 1), graph.axes(1))
        if x.size == 1:  # one value everywhere
            columns.append(graph.op("Add", graph.op("Mul", f, graph.constant(
                f"isotonic_zero_{k}", np.asarray(0.0))), graph.constant(
                f"isotonic_value_{k}", np.asarray(p[0]))))
            continue
        width = np.diff(x)
        # thresholds that repeat (a jump) get no slope: the later one's value is read there
        slopes = np.divide(np.diff(p), width, out=np.zeros_like(width), where=width > 0)
        high = graph.constant(f"isotonic_high_{k}", np.asarray(x[-1]))
        f = graph.op("Min", graph.op("Max", f, graph.constant(f"isotonic_low_{k}",
                                                              np.asarray(x[0]))), high)
        below = graph.op("ReduceSum", graph.op("Cast", graph.op(
            "GreaterOrEqual", f, graph.constant(f"isotonic_thresholds_{k}", x[None, :])),
            to=graph.onnx.TensorProto.DOUBLE), graph.axes(1), keepdims=1)
        segment = graph.op("Cast", graph.op("Min", graph.op(
            "Sub", below, graph.constant(f"isotonic_one_{k}", np.asarray(1.0))),
            graph.constant(f"isotonic_last_{k}", np.asarray(float(x.size - 2)))),
            to=graph.onnx.TensorProto.INT64)

        def at(name, array, k=k, segment=segment):  # this threshold set's k and segment
            return graph.op("Gather", graph.constant(f"isotonic_{name}_{k}", array), segment,
                            axis=0)  # (batch, 1)

        inside = graph.op("Add", at("start_values", p[:-1]), graph.op(
            "Mul", at("slopes", slopes), graph.op("Sub", f, at("starts", x[:-1]))))
        # at the last threshold and above, its value itself (numpy.interp's right end)
        columns.append(graph.op("Where", graph.op("GreaterOrEqual", f, high), graph.constant(
            f"isotonic_end_{k}", np.asarray(p[-1])), inside))
    return columns[0] if len(columns) == 1 else graph.op("Concat", *columns, axis=1)


def _probabilities(graph: _Graph, sums: str, calibration: dict, n_classes: int) -> str:
    """(batch, classes) probabilities from the calibration's maps of the decision values
    ``sums`` (batch, outputs), normalized as ``calibration._class_probabilities`` does: two
    classes ``[1 − p, p]``; more, the one-vs-rest values divided by their sum (equal shares
    where it is 0)."""
    if calibration["method"] == "sigmoid":
        p = _sigmoid_values(graph, sums, calibration)
    else:
        p = _isotonic_values(graph, sums, calibration)
    if n_classes == 2:
        return graph.op("Concat", graph.op("Sub", graph.constant("one", np.asarray(1.0)), p), p,
                        axis=1, output="probabilities")
    total = graph.op("ReduceSum", p, graph.axes(1), keepdims=1)
    positive = graph.op("Greater", total, graph.constant("zero_total", np.asarray(0.0)))
    normalized = graph.op("Div", p, graph.op("Where", positive, total,
                                             graph.constant("one_total", np.asarray(1.0))))
    uniform = graph.constant("uniform", np.full((1, n_classes), 1.0 / n_classes))
    return graph.op("Where", positive, normalized, uniform, output="probabilities")


def _feature_props(model: KernelExpansion) -> dict[str, str]:
    """``feature_names`` and ``feature_types`` as JSON lists, those the model has (and its
    categorical ``encoding``, where it has one)."""
    props = {}
    if model.categories is not None:
        props["categories"] = json.dumps(encoding_to_json(model.categories))
    if model.feature_names is not None:
        props["feature_names"] = json.dumps(list(model.feature_names))
        if model.feature_types is not None:
            props["feature_types"] = json.dumps(list(model.feature_types))
    return props


def to_onnx(model: KernelExpansion, input_type: str = "double", probabilities: bool = True,
            name: str = "sodm_spark_kernel_expansion"):
    """``model`` as an ``onnx.ModelProto`` (module docstring): input ``features`` (batch,
    ``model.n_features_in``) of ``input_type`` ("double", or "float": rows of float32, cast
    to float64 in the graph); outputs ``label`` (classifiers), ``scores`` and, when the model
    is calibrated and ``probabilities`` is true, ``probabilities``; the model's feature names
    and types, when it has them, in ``metadata_props`` and the input's ``doc_string``. A
    ValueError says why a model cannot be exported; an ImportError, how to install onnx."""
    if input_type not in INPUT_TYPES:
        raise ValueError(f"input_type must be one of {', '.join(INPUT_TYPES)}, "
                         f"got {input_type!r}.")
    onnx = import_onnx()
    helper, double = onnx.helper, onnx.TensorProto.DOUBLE
    vectors = _dense_support_vectors(model)
    coef = np.asarray(model.coef, dtype=np.float64)
    coef = coef.reshape(vectors.shape[0], coef.shape[1] if coef.ndim == 2 else 1)
    outputs_count = coef.shape[1]
    calibration = model.calibration.to_dict() \
        if probabilities and model.calibration is not None else None
    if calibration is not None and calibration.get("method") not in CALIBRATIONS:
        raise ValueError(f"the model's {calibration.get('method')!r} calibration has no ONNX "
                         f"export here ({' and '.join(CALIBRATIONS)} have); export the labels "
                         "and scores alone (to_onnx(..., probabilities=False), the job's "
                         "--no-probabilities).")
    graph = _Graph(onnx)
    rows, inputs, opsets = graph_inputs(onnx, graph, model, input_type, OPSET)
    sums = _kernel_sums(graph, model.kernel, _kernel_inputs(graph, model, rows), vectors, coef)
    # k + c adds c·Σ_i α_i to each output (core/kernels.py): one intercept with the model's
    bias = model.kernel.offset * coef.sum(axis=0)
    if model.intercept is not None:
        bias = bias + np.asarray(model.intercept, dtype=np.float64).ravel()
    if model.intercept is not None or np.any(bias):
        sums = graph.op("Add", sums, graph.constant("intercept", bias[None, :]))
    batch = "batch"
    if outputs_count == 1:
        scores = graph.op("Squeeze", sums, graph.axes(1), output="scores")
        score_shape: list[str | int] = [batch]
    else:
        scores = graph.op("Identity", sums, output="scores")
        score_shape = [batch, outputs_count]
    declared = [helper.make_tensor_value_info(scores, double, score_shape)]
    classes = np.asarray(model.classes)
    if not model.is_regression:
        values, element = _classes_tensor(onnx, classes)
        index = graph.op("ArgMax", sums, axis=1, keepdims=0) if outputs_count > 1 else \
            graph.op("Cast", graph.op("Greater", scores, graph.constant(
                "decision_threshold", np.asarray(0.0))), to=onnx.TensorProto.INT64)
        label = graph.op("Gather", graph.constant("classes", values), index, axis=0,
                         output="label")
        declared.insert(0, helper.make_tensor_value_info(label, element, [batch]))
    if calibration is not None:
        declared.append(helper.make_tensor_value_info(
            _probabilities(graph, sums, calibration, classes.size), double,
            [batch, classes.size]))
    size = sum(tensor.ByteSize() for tensor in graph.arrays)
    if size > MAX_MODEL_BYTES:
        raise ValueError(
            f"the graph would hold {size / 2**30:.2f} GiB of arrays ({vectors.shape[0]:,} "
            f"support vectors of {vectors.shape[1]:,} inputs in float64), above the "
            f"{MAX_MODEL_BYTES / 2**30:.2f} GiB one ONNX file holds; compress the model to "
            "fewer points first (KernelExpansion.compress, the training job's --max-sv).")
    onnx_graph = helper.make_graph(graph.nodes, name, inputs, declared,
                                   initializer=graph.arrays)
    proto = helper.make_model(onnx_graph, opset_imports=opsets,
                              producer_name="sodm_spark", ir_version=IR_VERSION,
                              doc_string="A sodm_spark KernelExpansion: raw rows → label, "
                              "decision values (scores) and, if calibrated, probabilities.")
    helper.set_model_props(proto, {
        "kernel": json.dumps(model.kernel.to_dict()),
        "classes": json.dumps(classes.tolist()),
        "n_support": str(vectors.shape[0]),
        "calibration": calibration["method"] if calibration is not None else "none",
        **_feature_props(model)})
    onnx.checker.check_model(proto)
    return proto


def save_onnx(model: KernelExpansion, path, **options) -> list[str]:
    """Write :func:`to_onnx`'s graph of ``model`` to the local file ``path``, replacing it
    atomically (:func:`~sodm_spark.data.storage.replace_file`); ``options``: to_onnx's.
    Returns the graph's output names."""
    proto = to_onnx(model, **options)
    data = proto.SerializeToString()
    replace_file(path, lambda staging: staging.write_bytes(data))
    return [output.name for output in proto.graph.output]
