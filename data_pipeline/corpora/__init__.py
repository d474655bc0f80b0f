"""Corpus readers: what txl-prepare knows of each dataset, and how it reads one.

- datasets.py: one ``Dataset`` entry per ``--dataset`` (the registry ``DATASETS``);
- sources.py: a source (directory, file or archive, any fsspec URL) downloaded, checked,
  extracted, and its split files;
- splits.py: which files of a source are a dataset's splits;
- boundaries.py: where documents start in a file, found from a small window;
- encoding.py: the whole documents of a byte range as token ids;
- charlevel.py: enwik8 and text8, cut by position and tokenized per byte or character;
- records.py, jsonl.py and parquet.py: JSONL and Parquet files whose records are documents;
- subword.py, bytelevel.py and tokenizer_spec.py: subword tokenizers, byte-level BPE encoding,
  and what a tokenizer.json may hold.
"""
