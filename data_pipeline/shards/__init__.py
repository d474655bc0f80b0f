"""Shards: the prepared data's format on storage, between the corpora and the streams.

- ``format.py``: the layout, ``Manifest`` and ``ShardInfo``, loading and checking manifests.
- ``samples.py``: a sample's bytes decoded and checked (size, CRC-32, lengths, ids).
- ``writer.py``: ``ShardSink``, documents packed into samples and samples into indexed tars.
- ``storage.py``: one file system per URL, with retries for HTTP and S3.
- ``errors.py``: the pipeline's errors, each naming the file and sample.
"""
