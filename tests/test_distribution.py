"""How the workers of a multi-worker run part (util/distribution.leave_together), against a
stand-in for the coordination service's key-value store: the orders of events that a real
cluster meets only by chance (the chief gone the instant it has read a worker's last word) are
set here on purpose."""
import types

import pytest
import tensorflow as tf

from util import distribution, preemption, workers


class Store:
    """The coordination service's key-value store; `fail` maps a key to the error its set or
    get raises (as when the chief, which hosts the store, has exited)."""

    def __init__(self, fail=None):
        self.values, self.fail, self.reads = {}, fail or {}, []

    def set_config_key_value(self, key, value):
        if key in self.fail:
            raise self.fail[key]
        self.values[key] = value

    def get_config_key_value(self, key, timeout_ms):
        self.reads.append(key)
        if key in self.fail:
            raise self.fail[key]
        return self.values[key]


def _socket_closed():
    return tf.errors.UnavailableError(None, None, "Socket closed\nAdditional GRPC error info")


def _worker(task_id: int):
    resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(
        tf.train.ClusterSpec({"worker": ["localhost:1", "localhost:2"]}),
        task_type="worker", task_id=task_id)
    return types.SimpleNamespace(cluster_resolver=resolver)


@pytest.fixture
def cluster(monkeypatch):
    """Two workers sharing one stand-in store; returns a function that installs it."""
    monkeypatch.setattr(distribution, "num_workers", lambda strategy: 2)
    monkeypatch.setattr(distribution, "_partings", 0)  # so the first block is "parting1"

    def use(store):
        monkeypatch.setattr(distribution.tf_context, "context", lambda: store)
        return store
    return use


def test_a_worker_that_meets_the_chief_gone_after_reading_its_outcome_has_parted(cluster):
    """The chief exits as soon as it reads the worker's "leaving": the worker's call that wrote
    it may then fail with "Socket closed". The worker knows the chief's outcome: its run ended
    well, not with a dead-chief error (exit 4)."""
    store = cluster(Store(fail={"electra/parting1/leaving/worker:1": _socket_closed()}))
    store.values["electra/parting1/chief"] = "done"
    with distribution.leave_together(_worker(1)) as parting:
        pass
    assert parting.chief_outcome == "done"


def test_a_worker_that_never_hears_from_the_chief_reports_it_gone(cluster):
    cluster(Store(fail={"electra/parting1/chief": _socket_closed()}))
    with pytest.raises(workers.WorkerDied, match=r"the chief \(worker:0\) stopped before "
                                                 r"finishing its work \(Socket closed\)"):
        with distribution.leave_together(_worker(1)):
            pass


def test_the_chief_publishes_its_outcome_and_waits_for_every_worker(cluster):
    store = cluster(Store())
    store.values["electra/parting1/leaving/worker:1"] = "done"
    with distribution.leave_together(_worker(0)) as parting:
        pass
    assert parting.chief_outcome == "done"
    assert store.values["electra/parting1/chief"] == "done"
    assert store.reads == ["electra/parting1/leaving/worker:1"]


def test_a_preempted_worker_waits_for_the_chief_then_says_why_it_leaves(cluster):
    store = cluster(Store())
    store.values["electra/parting1/chief"] = "Preempted"
    with pytest.raises(preemption.Preempted):
        with distribution.leave_together(_worker(1)):
            raise preemption.Preempted("signalled")
    assert store.values["electra/parting1/leaving/worker:1"] == "Preempted"
