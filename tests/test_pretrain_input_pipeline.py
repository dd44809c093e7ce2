"""The training stream: deterministic, epoch coverage, exact resume, worker slices, held-out files."""
import json
import os

import numpy as np
import pytest
import tensorflow as tf

import pretrain_fixtures as fx
from pretrain import input_pipeline as ip
from pretrain import pretrain_data


def _write_numbered(directory, sizes):
    """Shards whose records carry a unique number in input_ids[1]."""
    files, k = [], 0
    for i, n in enumerate(sizes):
        path = os.path.join(directory, pretrain_data.shard_name(i, len(sizes)))
        records = []
        for _ in range(n):
            records.append(pretrain_data.serialize_example([fx.CLS, k, 0, 0], [1, 1, 0, 0],
                                                           [0] * 4))
            k += 1
        pretrain_data.write_examples(path, records)
        files.append(path)
    return files, k


def _take(files, batches, start=ip.START, batch=4, context=None, seed=3):
    ds = ip.train_dataset(files, seed=seed, global_batch_size=batch, max_seq_length=4,
                          cycle_length=2, shuffle_buffer_size=5, start_position=start,
                          input_context=context)
    out = []
    for b in ds.take(batches):
        assert b["input_ids"].dtype == tf.int32
        out.append((b["input_ids"][:, 1].numpy().tolist(),
                    tuple(b[ip.POSITION_KEY][0].numpy().tolist())))
    return out


def test_stream_is_deterministic_covers_each_epoch_and_resumes_exactly(tmp_path):
    files, total = _write_numbered(str(tmp_path), [7, 9, 5, 11, 8])
    stream = _take(files, 40)
    assert stream == _take(files, 40)
    numbers = [x for ids, _ in stream for x in ids]
    assert sorted(numbers[:total]) == list(range(total))  # epoch 1: every record once
    assert numbers[:total] != sorted(numbers[:total])  # shuffled
    assert numbers[total:2 * total] != numbers[:total]  # epoch 2 in another order
    assert _take(files, 40, seed=4) != stream
    for cut in (0, 6, 9, 23):  # resume after batch `cut` (some boundaries fall inside rounds)
        assert _take(files, 40 - cut - 1, start=stream[cut][1]) == stream[cut + 1:]


def test_worker_slices_and_replica_batches_tile_the_global_batch(tmp_path):
    files, _ = _write_numbered(str(tmp_path), [10, 10, 10])
    whole = _take(files, 5, batch=8)
    parts = []
    for worker in range(2):
        context = tf.distribute.InputContext(num_input_pipelines=2, input_pipeline_id=worker,
                                             num_replicas_in_sync=4)
        parts.append(_take(files, 10, batch=8, context=context))  # 2 replica batches per step
    for step, (ids, position) in enumerate(whole):
        pieces = []
        for worker in range(2):
            for replica in range(2):
                got_ids, got_position = parts[worker][2 * step + replica]
                assert got_position == position and len(got_ids) == 2
                pieces += got_ids
        assert pieces == ids


def test_held_out_files_from_metadata_or_hparam_are_excluded(tmp_path):
    fx.write_data(str(tmp_path), num_files=4, per_file=3, eval_files=1)
    pattern = str(tmp_path / "pretrain_tfrecords" / "pretrain_data.tfrecord*")
    files = ip.find_files(pattern)
    assert [os.path.basename(f) for f in files.eval] == [pretrain_data.shard_name(3, 4)]
    assert len(files.train) == 3 and not set(files.train) & set(files.eval)
    explicit = ip.find_files(pattern, eval_tfrecords=str(tmp_path / "pretrain_tfrecords" / "*-0-of-4"))
    assert [os.path.basename(f) for f in explicit.eval] == [pretrain_data.shard_name(0, 4)]
    assert len(explicit.train) == 3
    assert ip.count_records(files.eval) == 3
    batches = list(ip.eval_dataset(files.eval, global_batch_size=2, max_seq_length=fx.SEQ_LEN,
                                   num_batches=3))
    assert len(batches) == 3  # the 3 held-out records repeat to fill 3 batches of 2


def test_held_out_files_are_excluded_however_their_directory_is_spelled(tmp_path):
    # Training data as a file:// URL through a symlink, held-out shard as a local path: the
    # string comparison used to keep the held-out shard in the training data.
    fx.write_data(str(tmp_path / "data"), num_files=4, per_file=3, eval_files=0)
    os.symlink(tmp_path / "data", tmp_path / "link")
    held_out = str(tmp_path / "data" / "pretrain_tfrecords" / pretrain_data.shard_name(0, 4))
    files = ip.find_files(f"file://{tmp_path}/link//pretrain_tfrecords/pretrain_data.tfrecord*",
                          eval_tfrecords=held_out)
    assert files.eval == [held_out] and len(files.train) == 3
    assert all(not f.endswith(pretrain_data.shard_name(0, 4)) for f in files.train)


def test_missing_or_unusable_data_is_refused_with_the_pattern(tmp_path):
    with pytest.raises(ValueError, match="no file matches"):
        ip.find_files(str(tmp_path / "nothing*"))
    fx.write_data(str(tmp_path), num_files=1, per_file=2, eval_files=1)
    with pytest.raises(ValueError, match="held-out"):
        ip.find_files(str(tmp_path / "pretrain_tfrecords" / "pretrain_data.tfrecord*"))
    (tmp_path / "empty.tfrecord").write_bytes(b"")
    with pytest.raises(ValueError, match="empty"):
        ip.find_files(str(tmp_path / "empty.tfrecord"))
    bad = tmp_path / "pretrain_tfrecords" / "metadata.json"
    bad.write_text(json.dumps({"eval_files": "x"}))
    with pytest.raises(ValueError, match="must be a list"):
        ip.find_files(str(tmp_path / "pretrain_tfrecords" / "pretrain_data.tfrecord*"))
