"""Offline: text corpus -> pre-training tfrecords (build_pretraining_dataset.py).

corpus (finding and reading input files, documents), sentences (splitting over-long lines),
example_builder (the official example rules, one group of shards per worker), tfrecord_writer
(TFRecord framing without TensorFlow) and dataset_builder (the whole build: plan, workers,
resume, metadata.json). The record schema both sides share is pretrain/pretrain_data.py;
training reads the records with pretrain/input_pipeline.py.
"""
