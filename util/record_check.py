"""Naming the file behind a tf.data DataLossError.

TFRecordDataset reports a damaged file as "corrupted record at <offset>" (a CRC mismatch) or
"truncated record at <offset>" without saying which file, and inside a training loop the error
surfaces far from the reader. `locate_damage` re-reads the candidate files one by one to find it;
it runs only after such an error, so healthy runs never pay for it.
"""
import re
import struct

import tensorflow as tf

from util import fs, tf_data


class DamagedRecordFileError(ValueError):
    """A tfrecord file is corrupted or truncated; the message names it."""


def locate_damage(files: list[str]) -> tuple[str, int, str] | None:
    """(path, number of good records before the damage, reader message) of the first damaged
    file among `files`, or None when they all read cleanly."""
    for path in files:
        good = 0
        try:
            for _ in tf_data.records(path):
                good += 1
        except tf.errors.DataLossError as e:
            return path, good, _reason(e.message)
    return None


def _reason(message: str) -> str:
    """"corrupted record at 264" out of the op-wrapped reader message."""
    match = re.search(r"(?:corrupted|truncated)[^\[\]{}\n]*", message)
    return match.group(0).strip() if match else message.splitlines()[0]


def damaged_file_error(files: list[str], error: tf.errors.DataLossError,
                       what: str = "tfrecord file", context: str = "") -> DamagedRecordFileError:
    """A DamagedRecordFileError naming the damaged file among `files` (or saying none was found,
    with the reader's message, when the damage is elsewhere)."""
    found = locate_damage(sorted(files))
    if found is None:
        return DamagedRecordFileError(
            f"data loss while reading ({_reason(error.message)}), but none of the "
            f"{len(files)} {what}s re-reads with an error{context}")
    path, good, message = found
    return DamagedRecordFileError(
        f"{what} {path} is damaged: {message} (after {good} good records); rebuild or remove "
        f"it{context}")


def _crc32c_table() -> list[int]:
    table = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_CRC32C = _crc32c_table()


def _masked_crc32c(data: bytes) -> int:
    crc = 0xFFFFFFFF
    for byte in data:
        crc = _CRC32C[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    crc ^= 0xFFFFFFFF
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


def is_tfrecord_file(path: str) -> bool:
    """Whether `path` starts like a TFRecord file: an 8-byte length and its masked CRC32C (12
    bytes read). Empty files count as TFRecord files (with no records)."""
    with fs.open(path, "rb") as f:
        header = f.read(12)
    if not header:
        return True
    if len(header) < 12:
        return False
    return struct.unpack("<I", header[8:])[0] == _masked_crc32c(header[:8])


def not_tfrecord_files(files: list[str]) -> list[str]:
    """The files among `files` that are not TFRecord files (e.g. a metadata.json a glob caught)."""
    return [f for f in files if fs.isfile(f) and not is_tfrecord_file(f)]
