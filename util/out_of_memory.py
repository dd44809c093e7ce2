"""Out of memory as one line: the sizes that did not fit and the settings that make them smaller.

TensorFlow reports an allocation that fails (host or accelerator memory) as ResourceExhaustedError,
Python as MemoryError; either used to end a command in a traceback of some 70 lines and exit
status 1. Every command that trains or predicts catches ERRORS in its main() and prints
`message(...)` instead, with exit status EXIT_OUT_OF_MEMORY: not bad input (2: the same settings
may fit a bigger machine) and not worth re-running unchanged (75).
"""
import tensorflow as tf

EXIT_OUT_OF_MEMORY = 5
ERRORS = (tf.errors.ResourceExhaustedError, MemoryError)


def reason(error: BaseException) -> str:
    """The line of the error that says what failed to fit (TensorFlow's "OOM when allocating
    tensor with shape[...]"), without the graph's node trace."""
    text = error.message if isinstance(error, tf.errors.OpError) else str(error)
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    telling = [line for line in lines if any(
        word in line.lower() for word in ("oom", "memory", "allocat", "exhausted"))]
    line = (telling or lines or [type(error).__name__])[0]
    return line if len(line) <= 200 else line[:197] + "..."


def message(error: BaseException, sizes: str, levers: str) -> str:
    """"out of memory with <sizes> (<reason>); to fit, <levers>"."""
    return f"out of memory with {sizes} ({reason(error)}); to fit, {levers}"
