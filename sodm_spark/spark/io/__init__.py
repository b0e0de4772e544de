"""Reading training data into an RDD of numpy blocks (docs/design.md §5, §6).

Everything downstream (strata, levels, DSVRG) consumes ``RDD[Block]``: each :class:`Block` a
run of at most ``MAX_BLOCK_BYTES`` (16 MB) of a Spark partition's rows, a dense float64 or
float32 matrix (or CSR), so that no Spark record is large enough to strain the JVM. This package
is the only place that knows about file formats:

* ``read_blocks(spark, path, "libsvm")`` — LIBSVM/SVMlight text (``label [qid:N] idx:val ... [# comment]``, 1-based
  indices, the exchange format of every data set in the papers), parsed a partition at a time
  by :mod:`sodm_spark.data.formats.libsvm` straight into blocks; :func:`read_libsvm_local` is the
  same parser for small files on the driver.
* ``read_blocks(spark, path, "csv")`` — a label column and numeric feature columns.
* ``read_blocks(spark, path, "parquet")`` and :func:`dataframe_to_blocks` — a ``features``
  column (``array<double>`` or an ML vector) and a ``label`` column, or plain numeric columns.
  Partitions travel to numpy through Arrow (``mapInArrow``), never as per-row Python objects.
* :func:`check_blocks` — one job that counts labels and refuses NaN/inf (and magnitudes
  above 1e100, which overflow the kernels) before training.

Row ids are int64, unique and deterministic for the same input:

* LIBSVM: the 0-based line number over the input (files in Spark's listing order; blank and
  comment lines use up their number), so for one file ``row_id + 1`` is the line in the file.
* CSV, Parquet, DataFrames: ``(partition_index << 40) + row number within the partition``,
  Spark's partitions, also where the tasks read Parquet files with pyarrow
  (:mod:`.parquet_files`, :mod:`.scan_plan`: Spark's scan planned, its rows read);
  local Parquet files of one array column, and files only pyarrow reaches:
  ``(row group number << 40) + row number within the row group``, row groups numbered over
  the files in name order.

Modules: ``blocks`` (the Block contract, errors, :func:`check_blocks`), ``read`` (the
:func:`read_blocks` dispatcher: input listing, slicing, formats), ``libsvm``, ``csv``,
``text_lines`` (text input's rows named by file and 1-based line in every check: NaN, ±inf,
values too large, CSV cells), ``arrow`` (DataFrames to blocks; the Arrow batch helpers the
scorer shares), ``parquet_files`` (Parquet tables of any layout read by pyarrow in the
tasks), ``scan_plan`` (which rows each of those tasks reads, and their ids),
``string_columns`` (a table's string columns encoded by those tasks),
``file_schemas`` (the files of one input refused when their columns differ).

Spark code here only moves arrays: the functions shipped to executors are module-level or
closures over plain values, and nothing is random.
"""
from ...data.formats.libsvm import parse_libsvm_line
from .arrow import (CHUNK_ROWS, batch_matrix, dataframe_to_blocks, numbered_batches,
                    numeric_array_column)
from .blocks import (DENSE_FROM_DENSITY, MAX_BLOCK_BYTES, ROW_ID_SHIFT, Block, BlockStats,
                     DataFormatError, DataPathError, bounded_blocks, check_blocks,
                     collect_blocks, dense_enough, error_text, feature_bytes, numpy_to_blocks,
                     spark_read)
from .libsvm import read_libsvm_local
from .file_schemas import check_parquet_files_agree
from .read import (FORMATS, INPUT_SPLIT_BYTES, FeatureColumns, TableColumns, input_slices,
                   input_statuses, read_blocks, table_feature_names)
from .text_lines import check_csv_cells

__all__ = [
    "numpy_to_blocks", "collect_blocks", "Block", "BlockStats", "DataFormatError", "DataPathError", "FORMATS",
    "parse_libsvm_line", "read_libsvm_local", "read_blocks", "dataframe_to_blocks",
    "check_blocks", "error_text", "spark_read", "dense_enough", "DENSE_FROM_DENSITY",
    "ROW_ID_SHIFT", "CHUNK_ROWS", "INPUT_SPLIT_BYTES", "input_slices", "batch_matrix",
    "numbered_batches", "numeric_array_column", "MAX_BLOCK_BYTES", "bounded_blocks",
    "feature_bytes", "check_csv_cells", "input_statuses", "TableColumns", "FeatureColumns",
    "check_parquet_files_agree", "table_feature_names",
]
