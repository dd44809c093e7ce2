"""Faults injected into worker processes (they import this module by name: keep it light)."""
import os
import signal
import time

from pretrain.builder import example_builder


def build_group_then_die_on_group_0(task, report):
    """example_builder.build_group, except that the worker given group 0 SIGKILLs itself first,
    as the out-of-memory killer would, after writing the time to WORKER_FAULT_TIME_FILE."""
    if task.group == 0:
        with open(os.environ["WORKER_FAULT_TIME_FILE"], "w", encoding="utf-8") as f:
            f.write(repr(time.time()))
        os.kill(os.getpid(), signal.SIGKILL)
    return example_builder.build_group(task, report)
