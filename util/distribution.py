"""tf.distribute strategies by name: one code path for one device, local GPUs, workers and TPUs."""
import json
import logging
import os

import tensorflow as tf

log = logging.getLogger(__name__)


STRATEGIES = ("default", "mirrored", "multi_worker", "tpu")


def make_strategy(name: str = "default", tpu_name: str | None = None, tpu_zone: str | None = None,
                  gcp_project: str | None = None) -> tf.distribute.Strategy:
    """`default` (one device), `mirrored` (all local GPUs, or CPU), `multi_worker`
    (MultiWorkerMirroredStrategy, cluster from the TF_CONFIG environment variable), `tpu`."""
    if name == "default":
        return tf.distribute.get_strategy()
    if name == "mirrored":
        return tf.distribute.MirroredStrategy()
    if name == "multi_worker":
        if "TF_CONFIG" not in os.environ:
            raise ValueError("strategy multi_worker needs the TF_CONFIG environment variable "
                             "(cluster spec and this worker's task); see README 'Multi-node'")
        try:
            json.loads(os.environ["TF_CONFIG"])
        except json.JSONDecodeError as e:
            raise ValueError(f"TF_CONFIG is not valid JSON: {e.msg}") from None
        return tf.distribute.MultiWorkerMirroredStrategy()
    if name == "tpu":
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver(
            tpu=tpu_name, zone=tpu_zone, project=gcp_project)
        tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
        return tf.distribute.TPUStrategy(resolver)
    raise ValueError(f"unknown strategy {name!r}; expected default, mirrored, multi_worker or tpu")


def is_chief(strategy: tf.distribute.Strategy) -> bool:
    """Whether this process writes checkpoints, summaries and results (worker 0)."""
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or not resolver.task_type:
        return True
    return resolver.task_type == "chief" or (
        resolver.task_type == "worker" and resolver.task_id == 0)


def per_replica_batch_size(global_batch_size: int, strategy: tf.distribute.Strategy,
                           key: str = "train_batch_size") -> int:
    replicas = strategy.num_replicas_in_sync
    if global_batch_size % replicas:
        raise ValueError(f"hparam {key!r} ({global_batch_size}) must be divisible by the number "
                         f"of replicas ({replicas})")
    return global_batch_size // replicas


def default_use_xla(use_xla: bool | None) -> bool:
    """XLA on GPU/TPU; off on CPU, where a probe found it slower and without bf16 kernels."""
    if use_xla is not None:
        return use_xla
    return bool(tf.config.list_logical_devices("GPU") or tf.config.list_logical_devices("TPU"))
