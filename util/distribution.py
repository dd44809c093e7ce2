"""tf.distribute strategies by name: one code path for one device, local GPUs, workers and TPUs."""
import contextlib
import json
import logging
import os
import re
from typing import Iterator

import tensorflow as tf
# The coordination service's key-value store has no public API in TensorFlow 2.x.
from tensorflow.python.eager import context as tf_context

from util import workers

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


def num_workers(strategy: tf.distribute.Strategy) -> int:
    """How many processes (chief and workers) run `strategy` together: 1 unless multi-worker."""
    if not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        return 1
    spec = strategy.cluster_resolver.cluster_spec()
    return sum(spec.num_tasks(job) for job in ("chief", "worker") if job in spec.jobs)


class Parting:
    """What `leave_together` learnt: the chief's outcome ("done", or an error's class name)."""
    chief_outcome: str | None = None


_partings = 0  # leave_together blocks so far: every worker passes the same ones in order


@contextlib.contextmanager
def leave_together(strategy: tf.distribute.Strategy, wait_secs: float = 3600.0,
                   wait_after_error_secs: float = 30.0) -> Iterator[Parting]:
    """The workers of a multi-worker run leave this block together, whatever ends it: a worker
    leaves only once the chief has finished (its checkpoint saved), the chief only once every
    worker has said it is leaving (through the coordination service's key-value store).

    So no worker exits while the chief may still need it: before the chief's checkpoint is
    written, or while the chief's part of the last collective may still be receiving its data
    (a worker's part of an all-reduce ends once its data is handed to the transport, not once
    the peer has it); the chief would then fail with "stopped sending heartbeats". A collective
    over dead peers (a worker killed, out of memory, its host gone) raises WorkerDied naming
    them.
    `wait_secs`: how long a worker waits for the chief's save; `wait_after_error_secs`: after a
    failure of this process's own (the others may never arrive)."""
    parting = Parting()
    if num_workers(strategy) == 1:
        yield parting
        return
    global _partings
    _partings += 1
    resolver = strategy.cluster_resolver
    me = f"{resolver.task_type}:{resolver.task_id}"
    spec = resolver.cluster_spec()
    everyone = [f"{job}:{i}" for job in ("chief", "worker") if job in spec.jobs
                for i in range(spec.num_tasks(job))]
    chief = is_chief(strategy)
    outcome = "done"
    try:
        yield parting
    except (tf.errors.UnavailableError, tf.errors.AbortedError) as e:
        gone = _peers_gone(e)
        if gone is None:
            raise
        raise gone from None  # no one to part with
    except BaseException as e:
        outcome = type(e).__name__
        wait = wait_secs if outcome == "Preempted" else wait_after_error_secs
        try:
            _part(f"electra/parting{_partings}", me, everyone, chief, outcome, wait)
        except tf.errors.OpError as part_error:  # the error in flight says more
            log.warning("could not wait for the other workers before leaving: %s",
                        _first_line(part_error))
        raise
    try:
        parting.chief_outcome = _part(f"electra/parting{_partings}", me, everyone, chief,
                                      outcome, wait_secs)
    except tf.errors.OpError as e:
        if chief:  # its own work is done; a worker that left without a word changes nothing
            log.warning("a worker did not say it was leaving: %s", _first_line(e))
        else:
            raise workers.WorkerDied(
                f"the chief ({everyone[0]}) stopped before finishing its work "
                f"({_first_line(e)}); its newest complete checkpoint is kept: re-run the same "
                "command on every worker to resume") from None


def _part(key: str, me: str, everyone: list[str], chief: bool, outcome: str,
          wait_secs: float, store=None) -> str:
    """One parting: the chief publishes its outcome and waits for every worker's "leaving";
    a worker waits for the chief's outcome, then says it is leaving. Returns the chief's.
    `store`: the coordination service's key-value store (this process's context by default)."""
    store = store or tf_context.context()
    timeout_ms = max(1, int(wait_secs * 1000))
    if chief:
        store.set_config_key_value(f"{key}/chief", outcome)
        for task in everyone:
            if task != me:
                store.get_config_key_value(f"{key}/leaving/{task}", timeout_ms)
        return outcome
    chief_outcome = store.get_config_key_value(f"{key}/chief", timeout_ms)
    try:
        store.set_config_key_value(f"{key}/leaving/{me}", outcome)
    except tf.errors.OpError as e:
        # The chief hosts the store and exits the moment it reads this key, often before its
        # answer to this very call is sent ("Socket closed"). This worker knows the chief's
        # outcome, so the parting is complete either way.
        log.debug("the chief left while this worker said it was leaving: %s", _first_line(e))
    return chief_outcome


def _first_line(error: tf.errors.OpError) -> str:
    return (error.message or str(error)).strip().splitlines()[0]


def _peers_gone(error: tf.errors.OpError) -> workers.WorkerDied | None:
    """The error of a collective whose peers died, in one sentence naming them and the reason
    TensorFlow gives (missed heartbeats, a refused connection); None for another error."""
    text = error.message or str(error)
    tasks = sorted(set(re.findall(r"/job:\w+/replica:\d+/task:\d+", text)))
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    reason = next((line for line in lines if re.search(
        r"heartbeat|unhealthy|connect|coordination service", line, re.IGNORECASE)), None)
    if reason is None and not tasks:
        return None
    who = ", ".join(tasks) if tasks else "another worker"
    reason = reason or lines[0]
    return workers.WorkerDied(
        f"worker {who} of this multi-worker run stopped answering ({reason[:300]}): it died "
        "(killed, out of memory) or its host went down. The checkpoints are kept: re-run the "
        "same command on every worker to resume")
