"""Preparing: corpus -> vocabulary + document-contiguous shards + manifests (txl-prepare).

- ``job.py``: ``Job``, one run's steps (parts, merge) and ``prepare()``, txl-prepare as a
  function.
- ``settings.py``: ``Settings``, the run's options stated once and checked before anything is
  read; their defaults.
- ``plan.py``: what a run reads (files, units, fingerprints) and where it writes; the pieces of
  units run through the workers.
- ``vocabulary.py``: the vocabulary given, found again, built from word counts or trained (BPE),
  and saved.
- ``word_counts.py``: words counted in order of first appearance, in bounded memory.
- ``encoding.py``: each unit encoded into shards of its own, and its record.
- ``manifests.py``: each split's manifest written from its units, or an earlier one reused.
- ``units.py``: units, the grain of the work that parts divide and reruns skip.
- ``pieces.py``: what a worker does with one piece: count its words or encode it.
- ``verify.py``: ``txl-prepare --verify``, a prepared dataset re-checked end to end.
"""

from data_pipeline.prepare.job import Job, prepare
from data_pipeline.prepare.settings import Settings

__all__ = ["Job", "Settings", "prepare"]
