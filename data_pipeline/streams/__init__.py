"""Streams: prepared shards -> per-rank batches whose rows continue from step to step.

- ``batch_stream.py``: ``BatchStream``, the contract both streams keep and the trainer reads.
- ``token_streams.py``: ``TokenStreams``, one corpus's batches, for training and evaluation.
- ``mixing.py``: ``MixedStreams``, several corpora mixed by weight, every row still one stream.
- ``mix_rows.py``: a mix's global rows walked together, each next document from the corpus the
  group schedule names.
- ``mix_schedule.py``: which corpus a mix's row reads next, and where every row starts.
- ``mix_offsets.py``: where the group schedule starts counting, solved on sampled lengths.
- ``mix_state.py``: a mix's saved stream state checked, value by value, before it is used.
- ``shares.py``: one corpus of a mix, its epochs cut into one share per global row.
- ``reading.py``: ``Reading``, how both streams read: storage, retries, blocks ahead.
- ``geometry.py``: where every global row lies in an epoch; the layouts refused.
- ``table.py``: a split's samples, flattened from its manifest.
- ``order.py``: an epoch's order of samples and of the documents inside them.
- ``reader.py``: samples fetched with ranged reads and checked.
- ``prefetch.py``: the thread that reads blocks of batches ahead.
- ``text_batches.py``: evaluation batches of ids held in memory, cut as a prepared split's.
"""

from data_pipeline.streams.batch_stream import BatchStream, check_vocab
from data_pipeline.streams.geometry import IGNORE_INDEX, ORDERS
from data_pipeline.streams.mix_state import StreamStateError
from data_pipeline.streams.mixing import MixedStreams, MixSource, check_same_vocabulary
from data_pipeline.streams.reading import Reading
from data_pipeline.streams.text_batches import TextBatches
from data_pipeline.streams.token_streams import TokenStreams

__all__ = [
    "IGNORE_INDEX",
    "ORDERS",
    "BatchStream",
    "MixSource",
    "MixedStreams",
    "Reading",
    "StreamStateError",
    "TextBatches",
    "TokenStreams",
    "check_same_vocabulary",
    "check_vocab",
]
