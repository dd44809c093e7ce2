"""tf.data pipelines without tf.data's autotuning, and their fixed parallelism.

tf.data autotunes every pipeline unless told not to: a background thread wakes at a period that
doubles up to a minute, and deleting an iterator waits for its next wake-up. Measured here
(2 cores): a dataset read for 12 s took 8.4 s to delete; an ELECTRA-Small held-out eval of 6
batches spent 1.9 s of its 5.1 s there. Every held-out eval, fine-tuning epoch, trial and
prediction ends by deleting an iterator, and so does every full pass over files (record checks,
token counts). Our pipelines read and parse fixed-length records and cut batches to buckets,
cheap next to a model step: a fixed number of threads and a small prefetch feed the steps as well.
"""
import os

import tensorflow as tf

PARALLEL_CALLS = max(1, min(8, os.cpu_count() or 1))  # map threads of one pipeline
PREFETCH_BATCHES = 2  # batches prepared ahead of the step


def untuned(dataset: tf.data.Dataset) -> tf.data.Dataset:
    """`dataset` with tf.data's autotuning off (its iterators delete at once)."""
    options = tf.data.Options()
    options.autotune.enabled = False
    return dataset.with_options(options)


def records(paths, **kwargs) -> tf.data.Dataset:
    """tf.data.TFRecordDataset(paths, **kwargs), untuned."""
    return untuned(tf.data.TFRecordDataset(paths, **kwargs))
