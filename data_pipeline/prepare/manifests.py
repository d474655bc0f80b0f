"""Manifests: each split's, written from its units' records once all are encoded (a manifest
means a complete split), and an earlier run's found reusable when its inputs, vocabulary and
shards are the same."""

from __future__ import annotations

import contextlib
import logging
import posixpath

from data_pipeline.prepare.encoding import Encoder
from data_pipeline.prepare.pieces import Vocabulary
from data_pipeline.prepare.plan import Plan
from data_pipeline.prepare.units import describe
from data_pipeline.redact import redact_text
from data_pipeline.shards.errors import DataError, ManifestError
from data_pipeline.shards.format import (
    EOS_FORMAT_VERSION,
    FORMAT_VERSION,
    Manifest,
    ShardInfo,
    load_manifest,
    manifest_url,
)

log = logging.getLogger(__name__)


class Manifests:
    """The split manifests of a job's plan: written, reused, removed."""

    def __init__(self, plan: Plan, encoder: Encoder):
        self.plan, self.encoder = plan, encoder

    def write(self, split: str, voc: Vocabulary, sample_bytes: int | None) -> Manifest:
        """The split's manifest from its units' records (``sample_bytes``: of the tokenizer's
        training sample, if one was trained); shards no unit lists (from an earlier layout)
        are removed."""
        plan = self.plan
        units = [u for u in plan.units if u.split == split]
        records = {u: self.encoder.encoded(u, voc) for u in units}
        missing = [u for u in units if records[u] is None]
        if missing:
            raise ManifestError(
                f"{manifest_url(plan.out, split)}: {describe(missing)} not prepared yet; run "
                f"the parts that hold them (txl-prepare ... --part I/N) again, then --merge"
            )
        shards = [ShardInfo(**s) for u in units for s in records[u]["shards"]]
        eos_token, eos_id = getattr(voc, "eos", None), getattr(voc, "eos_id", None)
        manifest = Manifest(
            format_version=FORMAT_VERSION if eos_token is None else EOS_FORMAT_VERSION,
            dataset=plan.dataset,
            split=split,
            vocab_size=len(voc),
            vocab_sha256=voc.sha256,
            tokens=sum(s.tokens for s in shards),
            documents=sum(s.documents for s in shards),
            oov_tokens=sum(r["oov_tokens"] for r in records.values()),
            fingerprint=plan.fingerprints[split],
            shards=shards,
            level=plan.settings.spec.level,
            tokenizer_sample_bytes=sample_bytes,
            eos_token=eos_token,
            eos_id=eos_id,
        )
        if manifest.tokens == 0:
            plan.no_text(split, "only blank lines")
        split_dir = f"{plan.out_path}/{split}"
        listed = {s.url for s in shards}
        for path in plan.fs.glob(f"{split_dir}/*.tar"):
            if posixpath.basename(path) not in listed:
                plan.fs.rm_file(path)
        plan.fs.pipe_file(f"{split_dir}/manifest.json", manifest.to_json().encode())
        return manifest

    def reusable(self, split: str, voc: Vocabulary) -> Manifest | None:
        """The split's existing manifest if it was made from the same inputs and is complete."""
        plan = self.plan
        url = manifest_url(plan.out, split)
        if not plan.fs.exists(manifest_url(plan.out_path, split)):
            return None
        try:
            manifest = load_manifest(url, plan.out_options)
        except DataError:
            return None
        if manifest.fingerprint != plan.fingerprints[split] or manifest.vocab_sha256 != voc.sha256:
            return None
        shards = [(shard.url, shard.bytes) for shard in manifest.shards]
        return manifest if self.encoder.shards_present(split, shards) else None

    def other_vocabulary(self, voc: Vocabulary) -> str | None:
        """How an existing split's manifest names a vocabulary other than `voc` (its split,
        the start of its sha256 and its size), or None if every one was made with `voc`."""
        for split in dict.fromkeys(["train", "valid", "test", *self.plan.files]):
            url = manifest_url(self.plan.out, split)
            if not self.plan.fs.exists(manifest_url(self.plan.out_path, split)):
                continue
            with contextlib.suppress(DataError):  # unreadable: nothing a run could train on
                manifest = load_manifest(url, self.plan.out_options)
                if manifest.vocab_sha256 != voc.sha256:
                    sha, size = manifest.vocab_sha256[:12], manifest.vocab_size
                    return f"{split}/manifest.json: {sha}, {size:,} tokens"
        return None

    def reused(self, split: str, voc: Vocabulary) -> Manifest | None:
        """reusable(), said once: the other callers only ask, the merge takes the manifest."""
        manifest = self.reusable(split, voc)
        if manifest is not None:
            url = redact_text(manifest_url(self.plan.out, split))
            log.info("%s: reusing %d prepared shards", url, len(manifest.shards))
        return manifest

    def remove(self, split: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.plan.fs.rm_file(manifest_url(self.plan.out_path, split))
