"""The datasets txl-prepare knows, one entry each: adding a dataset is adding an entry to DATASETS.

Each ``Dataset`` says where its files come from (its official archive, the split file names), how
a file divides into documents and tokens, and how its vocabulary is built, as the Transformer-XL
reference prepares it:

* WikiText (``wikitext-103``, ``wikitext-2``): ``wiki.{train,valid,test}.tokens`` (official names)
  or ``{train,valid,test}.txt``. Each line is split on whitespace and gets ``<eos>``, blank lines
  included (reference ``tokenize(add_eos=True)``). An article starts at the ``" "`` line directly
  before a `` = Title = `` line that has a ``" "`` line after it too. A file that does not end
  with a newline is a cut prefix: its last (partial) article is dropped, with a warning.
* lm1b: training files ``news.en-NNNNN-of-00100``; held-out ``news.en.heldout-00000-of-00050*``
  is both ``valid`` and ``test``, as in the reference ``getdata.sh``. Each line is a sentence and
  a document, encoded ``<S> w1 ... wn <S>`` (reference ``add_double_eos``).
* enwik8, text8: the official zip or the unpacked file, cut by position into the three splits
  and tokenized per byte or character as the reference does (charlevel.py).
* ptb: ``ptb.{train,valid,test}.txt`` (official names, in ``simple-examples.tgz``) or
  ``{train,valid,test}.txt``; each file one document, lines lower-cased, split on whitespace,
  ``<eos>`` per line (reference ``Corpus`` with ``lower_case=True``).
* text: UTF-8 files under ``train/``, ``valid/``, ``test/`` subdirectories, else files whose name
  contains the split name, else every file is ``train``. Lines are tokenized as WikiText; a
  document is a block between blank lines (``--text-docs block``, the blank lines themselves are
  not tokens) or a whole file (``--text-docs file``).
* jsonl, parquet: ``*.jsonl`` / ``*.jsonl.gz`` / ``*.jsonl.zst`` or ``*.parquet`` files, split as
  text's are; each record's ``--text-field`` is a document, tokenized by a subword tokenizer
  (``--tokenizer``, records.py).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from data_pipeline.corpora import charlevel
from data_pipeline.corpora.boundaries import next_article, next_block, next_line
from data_pipeline.corpora.encoding import (
    Characters,
    Documents,
    WordLines,
    encode_lm1b,
    encode_ptb,
    encode_text_blocks,
    encode_text_file,
    encode_wikitext,
)
from data_pipeline.corpora.jsonl import JSONL_SUFFIXES, JsonLines
from data_pipeline.corpora.records import PARQUET_SUFFIXES, ParquetRows, RecordFileNames, Texts
from data_pipeline.corpora.splits import Lm1bFiles, NamedFiles, SplitLayout, TextFiles
from data_pipeline.vocab import EOS, SENTENCE, UNK_LM1B, UNK_WIKI


@dataclass(frozen=True)
class Download:
    """An official archive and its published checksum (or, where none is published, size)."""

    url: str
    """Where the archive is published."""
    algorithm: str | None
    """hashlib name of the published checksum (md5 or sha256); None where none is published."""
    digest: str | None
    """The published checksum, hex."""
    size: int | None = None
    """Size in bytes of the archive."""


@dataclass(frozen=True)
class Dataset:
    """One ``--dataset``: where its files come from, how they divide into documents and tokens,
    and how its vocabulary is built."""

    name: str
    """The ``--dataset`` name, recorded in every manifest."""
    splits: SplitLayout
    """Which files of a source are its train, valid and test splits."""
    documents: Documents
    """How a split file divides into documents and tokens (with ``--text-docs block``)."""
    file_documents: Documents | None = None
    """The documents with ``--text-docs file``; None: the option does not apply."""
    specials: tuple[str, ...] = ()
    """Tokens that open a built vocabulary, in this order."""
    min_count: int = 0
    """Default ``--min-count``: a built vocabulary leaves out tokens seen fewer times."""
    vocab_from_all_splits: bool = False
    """A built vocabulary counts every split, not train only (as the reference's Corpus does)."""
    official: Download | None = None
    """The archive used without ``--source``; None: ``--source`` is required."""
    cut_by_position: bool = False
    """The corpus is one file, cut by position into its splits of ``--test-chars`` (charlevel)."""
    subword: bool = False
    """Its documents are tokenized by a subword tokenizer (``--tokenizer``), not a vocabulary."""

    @property
    def level(self) -> str:
        """``char`` for a character-level dataset (its loss reads as bpc), else ``word``."""
        return self.documents.tokenization.level

    @property
    def char_tokenizer(self) -> charlevel.CharTokenizer | None:
        """A character-level dataset's tokenization (prompts and generated text use it too)."""
        tokenization = self.documents.tokenization
        return tokenization.tokenizer if isinstance(tokenization, Characters) else None

    def documents_for(
        self, text_docs: str, text_field: str = "text", skip_bad_records: bool = False
    ) -> Documents:
        """The documents ``--text-docs`` picks (only where there is a choice); a subword
        dataset's records read from ``text_field``, malformed ones refused or (with
        ``skip_bad_records``) left out and counted."""
        if self.subword:
            return replace(self.documents, tokenization=Texts(text_field, skip_bad_records))
        if self.file_documents is None:
            return self.documents
        if text_docs not in ("block", "file"):
            raise ValueError(f"text_docs must be 'block' or 'file', not {text_docs!r}")
        return self.file_documents if text_docs == "file" else self.documents


WIKITEXT_FILES = NamedFiles("wikitext", ("wiki.{}.tokens", "{}.txt"))
WIKITEXT_ARTICLES = Documents(
    "wikitext", WordLines(encode_wikitext), next_article, drops_cut_tail=True
)
# md5 as published with the dataset (also used by torchtext).
WIKITEXT_URL = "https://s3.amazonaws.com/research.metamind.io/wikitext/wikitext-{}-v1.zip"
# No checksum is published for enwik8, text8 and ptb; their sizes are the ones every downloader
# checks: enwik8.zip 36,445,475 (HF LTCB/enwik8 dataset card, download_size), text8.zip
# 31,344,016 (TensorFlow's word2vec tutorial, maybe_download), simple-examples.tgz 34,869,662
# (TensorFlow's PTB tutorial data scripts, archive_size).


def char_level(name: str, tokenizer: charlevel.CharTokenizer, official: Download) -> Dataset:
    """A character-level dataset as the reference prepares enwik8 and text8: one file cut into
    ``{train,valid,test}.txt`` by position, each a document, the vocabulary over all three."""
    return Dataset(
        name=name,
        splits=NamedFiles(name, ("{}.txt",)),
        documents=Documents(name, Characters(tokenizer)),
        vocab_from_all_splits=True,
        official=official,
        cut_by_position=True,
    )


DATASETS: dict[str, Dataset] = {
    d.name: d
    for d in (
        Dataset(
            name="wikitext-103",
            splits=WIKITEXT_FILES,
            documents=WIKITEXT_ARTICLES,
            specials=(EOS,),
            official=Download(WIKITEXT_URL.format(103), "md5", "9ddaacaf6af0710eda8c456decff7832"),
        ),
        Dataset(
            name="wikitext-2",
            splits=WIKITEXT_FILES,
            documents=WIKITEXT_ARTICLES,
            specials=(EOS,),
            vocab_from_all_splits=True,
            official=Download(WIKITEXT_URL.format(2), "md5", "542ccefacc6c27f945fb54453812b3cd"),
        ),
        Dataset(
            name="lm1b",
            splits=Lm1bFiles("lm1b"),
            documents=Documents("lm1b", WordLines(encode_lm1b), next_line),
            specials=(SENTENCE, UNK_LM1B),
            min_count=3,
            # sha256 from tensorflow_datasets' lm1b checksums.tsv (1,792,209,805 bytes).
            official=Download(
                "http://www.statmt.org/lm-benchmark/"
                "1-billion-word-language-modeling-benchmark-r13output.tar.gz",
                "sha256",
                "01ba60381110baf7f189dfd2b8374de371e8c9a340835793f190bdae9e90a34e",
            ),
        ),
        char_level(
            "enwik8",
            charlevel.ENWIK8,
            Download("http://mattmahoney.net/dc/enwik8.zip", None, None, 36_445_475),
        ),
        char_level(
            "text8",
            charlevel.TEXT8,
            Download("http://mattmahoney.net/dc/text8.zip", None, None, 31_344_016),
        ),
        Dataset(
            name="ptb",
            splits=NamedFiles("ptb", ("ptb.{}.txt", "{}.txt")),
            documents=Documents("ptb", WordLines(encode_ptb)),
            specials=(EOS,),
            vocab_from_all_splits=True,
            official=Download(
                "http://www.fit.vutbr.cz/~imikolov/rnnlm/simple-examples.tgz",
                None,
                None,
                34_869_662,
            ),
        ),
        Dataset(
            name="text",
            splits=TextFiles("text"),
            documents=Documents("text-block", WordLines(encode_text_blocks), next_block),
            file_documents=Documents("text-file", WordLines(encode_text_file)),
            specials=(EOS, UNK_WIKI),
            min_count=1,
        ),
        Dataset(
            name="jsonl",
            splits=RecordFileNames("jsonl", suffixes=JSONL_SUFFIXES),
            documents=JsonLines("jsonl", Texts()),
            subword=True,
        ),
        Dataset(
            name="parquet",
            splits=RecordFileNames("parquet", suffixes=PARQUET_SUFFIXES),
            documents=ParquetRows("parquet", Texts()),
            subword=True,
        ),
    )
}


def dataset(name: str) -> Dataset:
    """The dataset called ``name``."""
    if name not in DATASETS:
        raise ValueError(f"unknown dataset {name!r}; choose one of {', '.join(DATASETS)}")
    return DATASETS[name]
