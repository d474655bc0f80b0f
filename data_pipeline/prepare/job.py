"""Preparing a dataset: corpus -> vocabulary + document-contiguous shards + manifests (shards/).

``prepare()`` is txl-prepare as a function; ``Job`` holds one run's steps, which txl-prepare's
command line (cli.py) also runs one at a time as cluster jobs (``--part I/N``, ``--merge``).

The vocabulary comes from ``--vocab`` or is built from the train split (from every split
present when there is no train split, or where the dataset says so, as the reference does:
corpora/datasets.py). Splits missing from the source (e.g. the shared WikiText-103 copy has no
test file) are simply not prepared.

Steps (units.py): the files of each split are cut into units of ``--unit-bytes``. Without
``--vocab``, each unit's words are counted first and the vocabulary is built from the counts in
corpus order; then each unit is encoded into its own shards; then each split's manifest joins
its units' shards. Memory so depends on workers, piece, shard and vocabulary size only, never
on the corpus. Parts and merges give byte-identical output to one process. Building the
vocabulary takes two rounds (parts, merge, parts, merge); with ``--vocab`` one. A part skips
units already done, so a failed part is simply run again.

Record datasets (jsonl, parquet) are tokenized by a subword tokenizer instead (``--tokenizer
FILE``, or ``bpe:N`` trained by the first merge on a sample of the train split's documents,
streamed: corpora/subword.py); the root keeps it as tokenizer.json where vocab.txt would be. The
sample is ``--bpe-sample-bytes`` of source, whole pieces spread evenly over the split
(units.evenly_spaced), so the trainer's memory, which grows with the distinct words it counts,
stays flat however large the corpus; every manifest records the sample's size.

Reruns reuse what is done: a split whose manifest records the same input fingerprint (files,
sizes, modification times, options) and vocabulary, and whose shards are all present, is kept.

Speed: ``--workers`` processes each read and tokenize ~4 MiB pieces of the files (ends moved to
document boundaries) and send back only counts per distinct word, or final int32 ids; the main
process merges counts or writes shards. Encoding maps every token straight to its vocabulary id
through a hash table of exact word keys (wordids.WordTable): no sort, no Python object per word.
"""

from __future__ import annotations

from data_pipeline.corpora import sources
from data_pipeline.prepare.encoding import Encoder
from data_pipeline.prepare.manifests import Manifests
from data_pipeline.prepare.plan import Plan
from data_pipeline.prepare.settings import Settings
from data_pipeline.prepare.units import part_units
from data_pipeline.prepare.vocabulary import Vocabularies
from data_pipeline.shards.errors import DataError, SourceUnreachableError
from data_pipeline.shards.format import Manifest


def prepare(dataset: str, out: str, source: str | None = None, **options) -> dict[str, Manifest]:
    """Prepare ``dataset`` from ``source`` into ``out``; returns each split's manifest.

    ``options`` are ``Settings``' other fields, by name (``Job.run``: the steps).
    """
    return Job.open(Settings(dataset, out, source, **options)).run()


class Job:
    """One txl-prepare run: its plan, and the steps of parts and merge."""

    @classmethod
    def open(cls, settings: Settings) -> Job:
        """The job of ``settings``, its source downloaded, checked and extracted first where it
        is an archive (or cut into splits, enwik8 and text8)."""
        root = sources.resolve_source(
            settings.spec, settings.source, settings.cache_dir, settings.source_checksum,
            settings.source_options, settings.test_chars,
        )  # fmt: skip
        return cls(settings, root)

    def __init__(self, settings: Settings, root: str):
        """A job reading the corpus at ``root`` (a directory or file, resolved by ``open``)."""
        self.plan = Plan(settings, root)
        self.encoder = Encoder(self.plan)
        self.manifests = Manifests(self.plan, self.encoder)
        self.vocabulary = Vocabularies(self.plan, self.manifests)

    def run(self) -> dict[str, Manifest]:
        """All of it in this process; returns each split's manifest. This is the whole-corpus
        part followed by the merge (twice when the vocabulary is built: count, build, then
        encode, write manifests), exactly what ``--part I/N`` jobs and ``--merge`` do on a
        cluster.

        A run refused for its input (a DataError) leaves an output root it found absent or
        empty as it found it: the input or options must change, and with them the
        fingerprints, so nothing it wrote could be reused, only mistaken for a prepared
        dataset. An unreachable source or an interruption keeps what is done: the same command
        goes on from it."""
        undo = self.plan.output_undo()
        try:
            return self.steps()
        except SourceUnreachableError:
            raise
        except DataError:
            undo()
            raise

    def steps(self) -> dict[str, Manifest]:
        """run()'s steps."""
        self.run_part(0, 1)
        manifests = self.merge()
        if manifests is None:  # the vocabulary was built from the counts: now encode with it
            self.run_part(0, 1)
            manifests = self.merge()
        return manifests

    def run_part(self, part: int, parts: int) -> str:
        """Do part ``part`` (0-based) of ``parts`` of the next step: count the words of its
        units while the vocabulary is still to be built, else encode them into shards. Units
        already done are skipped, so a failed part is simply run again. Returns what it did."""
        plan, voc = self.plan, self.vocabulary.current()
        mine = part_units(plan.units, part, parts)
        if voc is None and plan.bpe:
            return "nothing to do: the merge (--merge) trains the tokenizer first"
        if voc is None:
            todo = [
                u for u in mine if u.split in plan.vocab_splits and not self.vocabulary.counted(u)
            ]
            self.vocabulary.count(todo)
            return f"counted the words of {len(todo)} units ({len(mine) - len(todo)} done before)"
        finished = {s for s in plan.files if self.manifests.reusable(s, voc)}
        todo = [u for u in mine if u.split not in finished and not self.encoder.encoded(u, voc)]
        for split in {u.split for u in todo}:
            self.manifests.remove(split)  # its shards are about to change
        self.encoder.encode(todo, voc)
        return f"encoded {len(todo)} units ({len(mine) - len(todo)} done before)"

    def merge(self) -> dict[str, Manifest] | None:
        """Build the vocabulary from every unit's counts (returns None: run the parts again),
        or write vocab.txt and every split's manifest from its units (returns the manifests)."""
        voc = self.vocabulary.current()
        if voc is None:
            self.vocabulary.build()
            return None
        self.vocabulary.save(voc)
        manifests = {
            s: self.manifests.reused(s, voc)
            or self.manifests.write(s, voc, self.vocabulary.bpe_sample_bytes())
            for s in self.plan.files
        }
        self.plan.records.remove()
        return manifests
