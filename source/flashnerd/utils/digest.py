"""Content digests of files someone else may have named."""

from __future__ import annotations

import hashlib
import os
from typing import BinaryIO


def file_sha256(f: BinaryIO) -> str:
    """SHA-256 of the open file `f`, read in chunks of 1 MiB and no further than the size it reports: a file of /proc
    reports 0 bytes and reads without end (/proc/self/pagemap: about 256 GiB)."""
    digest, left = hashlib.sha256(), os.fstat(f.fileno()).st_size
    while left > 0 and (chunk := f.read(min(left, 1 << 20))):
        digest.update(chunk)
        left -= len(chunk)
    return digest.hexdigest()
