"""Outputs get the modes a plain open() or mkdir would give them: what the user's umask allows.

tempfile.mkstemp creates files 0600 and mkdtemp directories 0700 (private by design), and
TensorFlow creates its directories 0755 whatever the umask: an output made that way and renamed
into place would be readable by its owner only, or closed to a group that the umask lets in.
The umask is read without being changed: os.umask can only be read by setting it, and a file
another thread created in that moment would get the temporary value.
"""
import os
import stat
import tempfile
import uuid

FILE_BASE = 0o666  # what open() asks for; the umask takes its bits away
DIR_BASE = 0o777  # what mkdir asks for


def umask() -> int:
    """The process's umask: Linux states it in /proc; elsewhere a probe file shows it."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    return _umask_from_a_probe()


def _umask_from_a_probe() -> int:
    """The bits the umask takes from a file created asking for all of them."""
    probe = os.path.join(tempfile.gettempdir(), f".umask-probe-{os.getpid()}-{uuid.uuid4().hex}")
    fd = os.open(probe, os.O_CREAT | os.O_EXCL | os.O_WRONLY, DIR_BASE)
    try:
        return DIR_BASE & ~stat.S_IMODE(os.fstat(fd).st_mode)
    finally:
        os.close(fd)
        os.remove(probe)


def file_mode() -> int:
    return FILE_BASE & ~umask()


def dir_mode() -> int:
    return DIR_BASE & ~umask()


def as_plain_file(path: str) -> None:
    """Gives local file `path` the mode open() would have given it."""
    os.chmod(path, file_mode())


def as_plain_dirs(top: str) -> None:
    """Gives local directory `top` and every directory below it the mode mkdir would have
    given them (files keep theirs: open() made them already)."""
    mode = dir_mode()
    os.chmod(top, mode)
    for root, directories, _ in os.walk(top):
        for name in directories:
            path = os.path.join(root, name)
            if not os.path.islink(path):
                os.chmod(path, mode)
