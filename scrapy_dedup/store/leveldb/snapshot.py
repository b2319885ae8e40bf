"""A snapshot of a LevelDB store that another process is writing: its files copied to a
temporary directory, and the copy opened (the writer's files are only ever read).

A snapshot may miss the writer's last writes, never half of one: each decision is one atomic
batch in LevelDB's log, and a batch cut short at the end of the copied log is dropped when the
copy is opened.
"""

from __future__ import annotations

import os
import shutil


def _files(path: str, *suffixes: str) -> list[str]:
    return sorted(entry.name for entry in os.scandir(path) if entry.name.endswith(suffixes) and entry.is_file())


def copy_store(src: str, dst: str) -> None:
    """Copy a LevelDB directory that another process is writing to.

    The order makes the copy a consistent prefix of the writes:

    1. the write-ahead logs: each holds later writes than the one before, and
       one cut short mid-record ends, when opened, at its last whole batch;
    2. the manifest CURRENT names: the tables and the oldest live log of the
       state it describes (LevelDB appends to it; a cut-short edit is ignored);
    3. the tables, listed after the manifest was copied, so every table it
       names is there unless a compaction deleted it meanwhile, which the
       open of the copy reports (and the snapshot is taken again).
    """
    for name in _files(src, ".log"):
        try:
            shutil.copyfile(os.path.join(src, name), os.path.join(dst, name))
        except FileNotFoundError:
            continue  # flushed to a table meanwhile: the manifest copied next names that table
    with open(os.path.join(src, "CURRENT"), encoding="ascii") as f:
        manifest = f.read().strip()
    shutil.copyfile(os.path.join(src, manifest), os.path.join(dst, manifest))
    with open(os.path.join(dst, "CURRENT"), "w", encoding="ascii") as f:
        f.write(manifest + "\n")
    for name in _files(src, ".ldb", ".sst"):
        # Copied, never hard-linked: opening the copy may write a new table under a
        # number the source is still writing, and a link would truncate the source's.
        try:
            shutil.copyfile(os.path.join(src, name), os.path.join(dst, name))
        except FileNotFoundError:
            continue  # compacted away: obsolete, or the open of the copy says it is missing
