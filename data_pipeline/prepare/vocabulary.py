"""The vocabulary a job encodes with: given (``--vocab``, a tokenizer.json), found where an
earlier run left it, built from the units' word counts, or a byte-level BPE trained on a sample
of the vocabulary splits' documents; written to the output root once."""

from __future__ import annotations

import posixpath
from collections.abc import Iterator
from functools import partial

import numpy as np

from data_pipeline.corpora.bytelevel import PreTokenCheck
from data_pipeline.corpora.subword import TOKENIZER_FILE, Subword
from data_pipeline.prepare.manifests import Manifests
from data_pipeline.prepare.pieces import Vocabulary, count_piece, in_own_process
from data_pipeline.prepare.plan import Plan
from data_pipeline.prepare.units import Unit, describe, evenly_spaced
from data_pipeline.prepare.word_counts import WordCounts
from data_pipeline.shards.errors import ManifestError, VocabMismatchError
from data_pipeline.shards.format import VOCAB_FILE
from data_pipeline.vocab import Vocab


class Vocabularies:
    """Finds, builds and saves the vocabulary of a job's plan (``at``: where it is kept)."""

    def __init__(self, plan: Plan, manifests: Manifests):
        self.plan, self.manifests = plan, manifests
        tokenizer = plan.settings.tokenizer
        self.kind = Subword if tokenizer else Vocab
        self.at = f"{plan.out}/{TOKENIZER_FILE if tokenizer else VOCAB_FILE}"
        self.path = f"{plan.out_path}/{posixpath.basename(self.at)}"
        self.voc: Vocabulary | None = None  # once found or built
        self.saved: str | None = None  # sha256 of the vocab.txt this job wrote or read

    def current(self) -> Vocabulary | None:
        """The vocabulary to encode with, or None while it still has to be built."""
        if self.voc is None:
            self.voc = self.find()
            if self.voc is not None:
                self.refuse_replacing(self.voc)
        return self.voc

    def refuse_replacing(self, voc: Vocabulary) -> None:
        """Refuse, before anything is replaced, to encode with `voc` over splits prepared with
        another vocabulary: runs trained on them need it (unless --overwrite)."""
        if self.plan.settings.overwrite:
            return
        other = self.manifests.other_vocabulary(voc)
        if other is not None:
            raise VocabMismatchError(
                f"{self.plan.out} holds a corpus prepared with another vocabulary ({other}; "
                f"this run's: {voc.sha256[:12]}, {len(voc):,} tokens), which the runs trained "
                f"on it need: choose another --out, or add --overwrite to replace it"
            )

    def find(self) -> Vocabulary | None:
        plan, settings = self.plan, self.plan.settings
        if settings.vocab:
            return Vocab.load(settings.vocab, plan.source_options, given=True)
        if settings.tokenizer and not plan.bpe:
            given = Subword.load(
                settings.tokenizer, plan.source_options, settings.eos_token, given=True
            )
            return given.require_eos(settings.tokenizer)
        if not plan.fs.exists(self.path):
            return None
        voc = self.kind.load(self.at, plan.out_options)
        if isinstance(voc, Subword) and voc.eos is None:  # trained before document boundaries
            return None
        built = plan.records.read("vocab", None, plan.vocab_fingerprint)
        if built and built["sha256"] == voc.sha256:
            return voc
        return voc if all(self.manifests.reusable(s, voc) for s in plan.vocab_splits) else None

    def counted(self, unit: Unit) -> bool:
        return (
            self.plan.records.read("counts", unit, self.plan.fingerprints[unit.split]) is not None
        )

    def count(self, units: list[Unit]) -> None:
        """Count the words of each unit (one record per unit: memory bounded by its types)."""
        for unit, results in self.plan.unit_results(count_piece, units):
            counts = WordCounts()
            for piece in results:
                counts.add(piece.words, piece.counts)
            record = {"fingerprint": self.plan.fingerprints[unit.split], "words": counts.words()}
            self.plan.records.write("counts", unit, {**record, "counts": counts.counts.tolist()})

    def build(self) -> Vocabulary:
        """The vocabulary from the counts of every unit of the vocabulary splits, in order (or
        the BPE tokenizer trained on their documents)."""
        plan = self.plan
        if plan.bpe:
            train = partial(Subword.train_bpe, plan.bpe, self.documents())
            trained = in_own_process(train, "the process training the tokenizer")
            return self.remember(trained)
        counts, missing = WordCounts(), []
        for unit in plan.vocab_units():
            record = plan.records.read("counts", unit, plan.fingerprints[unit.split])
            if record is None:
                missing.append(unit)
            else:
                text = " ".join(record["words"]).encode("utf-8")
                counts.add(text, np.asarray(record["counts"], np.int64))
        if missing:
            raise ManifestError(
                f"{plan.out}: {describe(missing)} not counted yet; run the parts that hold "
                f"them (txl-prepare ... --part I/N) again, then --merge"
            )
        words, specials = counts.words(), list(plan.settings.spec.specials)
        return self.remember(Vocab.build(words, counts.counts, specials, plan.min_count))

    def documents(self) -> Iterator[str]:
        """The documents of the tokenizer's training sample, streamed in corpus order (but for
        those with a pre-token too long to train on: refused or, skipping bad records, left
        out)."""
        check = PreTokenCheck()
        for piece in self.bpe_sample():
            yield from self.plan.documents.trainable(*piece, self.plan.source_options, check)

    def bpe_sample(self) -> list[tuple[str, int, int, int]]:
        """The pieces of the vocabulary splits a BPE is trained on: --bpe-sample-bytes of
        them, spread evenly (all of them when the splits are smaller)."""
        settings = self.plan.settings
        pieces = [p for u in self.plan.vocab_units() for p in u.pieces(settings.piece_bytes)]
        return evenly_spaced(pieces, settings.bpe_sample_bytes)

    def bpe_sample_bytes(self) -> int | None:
        """Source bytes of the BPE's training sample; None when the tokenizer was given."""
        if not self.plan.bpe:
            return None
        return sum(stop - start for _, start, stop, _ in self.bpe_sample())

    def remember(self, voc: Vocabulary) -> Vocabulary:
        """Save a built vocabulary and record which inputs it was built from."""
        self.refuse_replacing(voc)
        self.voc = voc
        self.save(voc)
        record = {"fingerprint": self.plan.vocab_fingerprint, "sha256": voc.sha256}
        self.plan.records.write("vocab", None, record)
        return voc

    def save(self, voc: Vocabulary) -> None:
        """Write vocab.txt (tokenizer.json) unless the same vocabulary is already there."""
        if self.saved == voc.sha256:  # this job wrote or read it (spares a reload)
            return
        plan = self.plan
        if not (
            plan.fs.exists(self.path)
            and self.kind.load(self.at, plan.out_options).sha256 == voc.sha256
        ):
            plan.fs.makedirs(plan.out_path, exist_ok=True)
            voc.save(self.at, plan.out_options)
        self.saved = voc.sha256
