"""MixedStreams: two real corpora (WikiText-103 paragraphs, One Billion Word sentences) with one
BPE tokenizer, mixed by weight: token shares, every row one stream of whole documents, resume,
world sizes, one vocabulary."""

from __future__ import annotations

import itertools
import json
import logging
import math
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from tokenizers import Tokenizer

from bench import mix_shares
from data_pipeline import TokenStreams, VocabMismatchError, load_manifest, manifest_url, prepare
from data_pipeline.streams import MixedStreams, MixSource, Reading
from data_pipeline.streams.shares import LENGTH_SAMPLES
from tests.data_pipeline.corpora.test_records import write_jsonl
from tests.processes import python_ranks

LAYOUT = {"sample_size": 5_000, "shard_size": 50_000, "progress": False}


def paragraphs(path: Path) -> list[str]:
    """The non-empty, non-heading lines of a WikiText file, each one document."""
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    return [line for line in lines if line.strip() and not line.startswith(" = ")]


@pytest.fixture(scope="module")
def corpora(shared_data, tmp_path_factory) -> dict[str, tuple[Path, list[str]]]:
    """wiki (WikiText-103 paragraphs) with a byte-level BPE trained on it, news (One Billion Word
    sentences) with that same tokenizer, and other (news again) with a tokenizer of its own;
    each as (dataset root, train documents)."""
    root = tmp_path_factory.mktemp("mix")
    wiki = paragraphs(shared_data / "wikitext-103" / "wiki.train.tokens")
    valid = paragraphs(shared_data / "wikitext-103" / "wiki.valid.tokens")[:200]
    news = (
        (shared_data / "one-billion-word" / "news.en.heldout-00000-of-00050.part1")
        .read_text(encoding="utf-8")
        .splitlines(keepends=True)
    )
    sources = {"wiki": (wiki, valid), "news": (news[:2400], news[2400:]), "other": (news, news)}
    for name, (train, held_out) in sources.items():
        write_jsonl(root / "src" / name / "train" / "docs.jsonl", train)
        write_jsonl(root / "src" / name / "valid" / "docs.jsonl", held_out)
    shared = f"file://{root / 'wiki' / 'tokenizer.json'}"
    for name, tokenizer in (("wiki", "bpe:600"), ("news", shared), ("other", "bpe:300")):
        prepare("jsonl", str(root / name), str(root / "src" / name), tokenizer=tokenizer, **LAYOUT)
    return {name: (root / name, docs[0]) for name, docs in sources.items()}


def sources(corpora, weights: dict[str, float], split: str = "train") -> list[MixSource]:
    return [MixSource(n, manifest_url(str(corpora[n][0]), split), w) for n, w in weights.items()]


class Reference:
    """A corpus's tokens in corpus order and its document ends, by the tokenizers library: each
    document's ids, then the end-of-text token its train manifest names."""

    def __init__(self, root: Path, documents: list[str], global_rows: int):
        library = Tokenizer.from_file(str(root / "tokenizer.json"))
        eos = library.token_to_id(load_manifest(manifest_url(str(root), "train")).eos_token)
        ids = [library.encode(d, add_special_tokens=False).ids + [eos] for d in documents]
        self.tokens = np.array([i for doc in ids for i in doc], np.int64)
        self.ends = np.cumsum([len(doc) for doc in ids])
        self.share = len(self.tokens) // global_rows

    def document(self, row: int, position: int) -> np.ndarray:
        """The rest of the document at ``position`` of row ``row``'s share (cut at its end)."""
        start = row * self.share + position
        end = min(
            self.ends[np.searchsorted(self.ends, start, side="right")],
            start - position + self.share,
        )
        return self.tokens[start:end]


def parse_row(
    stream: np.ndarray, row: int, refs: dict[str, Reference], start: dict[str, int]
) -> list[tuple[str, int]]:
    """Split a row's token stream into whole documents, each the next one of some corpus's share
    for this row (from ``start``'s position in it, from its start after its end; the first
    may be the rest of a document): their (corpus, tokens), in order, and ("break", 0) where no
    corpus's next document continues the stream."""
    position = dict(start)
    documents, i = [], 0
    while i < len(stream):
        for name, ref in refs.items():
            doc = ref.document(row, position[name])
            n = min(len(doc), len(stream) - i)
            if np.array_equal(stream[i : i + n], doc[:n]):
                break
        else:
            return [*documents, ("break", 0)]
        documents.append((name, n))
        i, position[name] = i + n, (position[name] + n) % ref.share
    return documents


def rows_of(batches) -> np.ndarray:
    """Each row's inputs over all batches, plus the last target: [rows, steps * tgt_len + 1]."""
    inputs = torch.cat([x for x, _ in batches], dim=1)
    return torch.cat([inputs, batches[-1][1][:, -1:]], dim=1).numpy()


def bounds(documents: list[tuple[int, int]]) -> np.ndarray:
    """A row's [documents, 3]: begin, end (in tokens of the row) and corpus of each document."""
    lengths = np.array([n for _, n in documents], np.int64)
    ends = np.cumsum(lengths)
    return np.stack([ends - lengths, ends, [c for c, _ in documents]], axis=1)


def group_choices(rows: list[np.ndarray]) -> list[tuple[int, int, int]]:
    """(token, row, next corpus) at every document end but each row's last, in the order the
    group schedule takes them: by token, then row."""
    found = []
    for g, spans in enumerate(rows):
        found += [(int(end), g, int(c)) for end, c in zip(spans[:-1, 1], spans[1:, 2])]
    return sorted(found)


def group_at(rows: list[np.ndarray], t: int, g: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Every row's tokens per corpus up to token t, and the corpora of the rows but g there (a
    row ending at t before g in the order has taken its next; after g, not yet)."""
    counts, others = np.zeros(k, np.int64), np.zeros(k, np.int64)
    for h, spans in enumerate(rows):
        read = np.clip(t - spans[:, 0], 0, spans[:, 1] - spans[:, 0])
        counts += np.bincount(spans[:, 2], read, minlength=k).astype(np.int64)
        if h != g:
            i = np.searchsorted(spans[:, 1], t, side="right" if h < g else "left")
            others[spans[min(i, len(spans) - 1), 2]] += 1
    return counts, others


def test_a_mix_realizes_its_token_shares_with_every_row_one_stream(corpora):
    rows, tgt_len, steps = 8, 150, 500
    weights = {"wiki": 0.7, "news": 0.3}
    stream = MixedStreams(
        sources(corpora, weights), rows, tgt_len, seed=11, reading=Reading(block_tokens=20_000)
    )
    begin = [cursor.copy() for cursor in stream.cursors]
    batches = list(itertools.islice(stream, steps))
    assert all(x.shape == y.shape == (rows, tgt_len) for x, y in batches)
    for (x, y), (next_x, _) in zip(batches, batches[1:]):
        assert torch.equal(x[:, 1:], y[:, :-1]) and torch.equal(y[:, -1], next_x[:, 0])
    refs = {n: Reference(corpora[n][0], corpora[n][1], rows) for n in weights}
    assert len({cursor.corpus for cursor in begin}) == 2  # rows start in both corpora
    rows_documents = []
    for g, row in enumerate(rows_of(batches)):
        start = dict(zip(stream.names, begin[g].skipped))
        documents = parse_row(row[:-1], g, refs, start)
        assert ("break", 0) not in documents, f"row {g} is not one stream of whole documents"
        assert documents[0][0] == stream.names[begin[g].corpus]  # the rest of its start's one
        assert sum(n for _, n in documents) == steps * tgt_len
        rows_documents.append(bounds([(stream.names.index(name), n) for name, n in documents]))
    # Every next document comes from the corpus the group schedule names at the token where
    # the one before ends, from every row's tokens up to there and where the other rows stand.
    for t, g, chosen in group_choices(rows_documents):
        counts, others = group_at(rows_documents, t, g, len(weights))
        assert stream.schedule.choose(counts + stream.walk.offsets, others, rows) == chosen
    total = dict.fromkeys(weights, 0)
    for spans in rows_documents:
        for begin, end, c in spans:
            total[stream.names[c]] += int(end - begin)
    assert stream.mix_tokens() == total
    for name, weight in weights.items():
        assert abs(total[name] / (rows * steps * tgt_len) - weight) < 0.01, total


def test_resume_gives_the_same_next_batches_across_a_corpus_epoch(corpora, caplog):
    weights = {"wiki": 0.2, "news": 0.8}

    def open_stream():
        return MixedStreams(sources(corpora, weights), 8, 50, seed=3, order="shuffle",
                            reading=Reading(block_tokens=3_000))  # fmt: skip

    stream, expected, logged, news_epoch = open_stream(), [], [], []
    with caplog.at_level(logging.INFO, logger="data_pipeline.streams.mixing"):
        for batch in itertools.islice(stream, 640):
            expected.append(batch)
            logged.append([r.message for r in caplog.records])
            news_epoch.append(max(row[2] for row in stream.row_states()))
    # One line, at the batch where the first row's share of news ran out (not when read ahead).
    wrap = news_epoch.index(1)
    assert logged[wrap - 1] == [] and len(logged[wrap]) == 1
    assert logged[wrap][0].startswith("mix: corpus news ran out in row ")
    stream = open_stream()
    k = wrap + 20  # past that batch
    list(itertools.islice(stream, k))
    state = stream.state_dict()
    assert k + 40 <= 640 and max(row[2] for row in state["rows"]) >= 1
    resumed = open_stream()
    resumed.load_state_dict(state)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="data_pipeline.streams.mixing"):
        for (x, y), (ex, ey) in zip(
            itertools.islice(resumed, 40), expected[k : k + 40], strict=True
        ):
            assert torch.equal(x, ex) and torch.equal(y, ey)
    assert caplog.records == []  # the epoch it resumed in was announced before


@pytest.mark.parametrize("saved_world,resumed_world", [(2, 1), (1, 4)])
def test_world_sizes_with_the_same_global_rows_give_the_same_batches(
    corpora, saved_world, resumed_world
):
    global_rows, tgt_len, k = 4, 40, 60
    mix = sources(corpora, {"wiki": 0.5, "news": 0.5})

    def ranks(world: int) -> list[MixedStreams]:
        per_rank = global_rows // world
        reading = Reading(block_tokens=2_000)
        return [
            MixedStreams(mix, per_rank, tgt_len, rank=r, world_size=world, seed=7, reading=reading)
            for r in range(world)
        ]

    expected = list(itertools.islice(ranks(1)[0], k + 20))
    saved = ranks(saved_world)
    saved_batches = [list(itertools.islice(s, k)) for s in saved]
    for step in range(k):
        assert torch.equal(torch.cat([b[step][0] for b in saved_batches]), expected[step][0])
    state = saved[0].state_of([row for s in saved for row in s.row_states()])
    resumed = ranks(resumed_world)
    for stream in resumed:
        stream.load_state_dict(state)
    resumed_batches = [list(itertools.islice(s, 20)) for s in resumed]
    for step, (ex, ey) in enumerate(expected[k:]):
        assert torch.equal(torch.cat([b[step][0] for b in resumed_batches]), ex)
        assert torch.equal(torch.cat([b[step][1] for b in resumed_batches]), ey)


def test_a_mixed_state_and_a_single_corpus_state_do_not_load_into_each_other(corpora):
    mixed = MixedStreams(sources(corpora, {"wiki": 1, "news": 1}), 4, 40)
    single = TokenStreams(manifest_url(str(corpora["wiki"][0]), "train"), 4, 40)
    with pytest.raises(ValueError, match=r"^stream state is of one corpus \(data\.path\), this"):
        mixed.load_state_dict(single.state_dict())
    with pytest.raises(ValueError, match=r"^stream state is of a mix of corpora \(data\.mix\)"):
        single.load_state_dict(mixed.state_dict())


@pytest.mark.slow
def test_two_ranks_gather_the_state_and_tokens_of_one_process(corpora, tmp_path):
    mix = sources(corpora, {"wiki": 0.6, "news": 0.4})
    script = (
        "import itertools, sys, torch, torch.distributed as dist\n"
        "from data_pipeline.streams import MixedStreams, MixSource, Reading\n"
        "rank = int(sys.argv[1])\n"
        f"dist.init_process_group('gloo', init_method='file://{tmp_path}/store', rank=rank, "
        "world_size=2)\n"
        f"s = MixedStreams({mix!r}, 2, 30, rank=rank, world_size=2, seed=5)\n"
        "inputs = [x for x, _ in itertools.islice(s, 25)]\n"
        "out = dict(inputs=inputs, state=s.state_dict(), mix=s.mix_tokens())\n"
        f"torch.save(out, f'{tmp_path}/rank{{rank}}.pt')\n"
        # Together out of the group: a rank that exits while its peer still works can abort
        # in gloo's teardown.
        "dist.barrier()\n"
        "dist.destroy_process_group()\n"
    )
    python_ranks(script, 2, timeout=120)
    ranks = [torch.load(tmp_path / f"rank{r}.pt") for r in range(2)]
    single = MixedStreams(mix, 4, 30, seed=5)
    for step, (x, _) in enumerate(itertools.islice(single, 25)):
        assert torch.equal(torch.cat([ranks[0]["inputs"][step], ranks[1]["inputs"][step]]), x)
    assert ranks[0]["state"] == ranks[1]["state"] == single.state_dict()
    assert ranks[0]["mix"] == ranks[1]["mix"] == single.mix_tokens()


def test_corpora_with_different_tokenizers_are_refused_by_name(corpora):
    with pytest.raises(
        VocabMismatchError, match=r"^data\.mix: corpora wiki and other have different vocab"
    ):
        MixedStreams(sources(corpora, {"wiki": 1, "news": 1, "other": 1}), 2, 10)


@pytest.fixture(scope="module")
def long_and_short(shared_data, tmp_path_factory) -> dict[str, Path]:
    """long: WikiText-103 articles (about 5,600 tokens each) with a byte-level BPE of 2,000
    trained on them; short: One Billion Word sentences, 18 to a document (about 900 tokens),
    with that tokenizer: the mix a user found off by 30 points after 200 steps."""
    return mix_shares.long_and_short(shared_data, tmp_path_factory.mktemp("long-short"))


@pytest.fixture(scope="module")
def at_20(long_and_short) -> list[float]:
    """The long corpus's share at step 20 of 8 rows of 64 (the tiny config's) at weight 0.7,
    seeds 0 to 31: read once for the two tests that look at it."""
    mix = mix_shares.mix_of(long_and_short, 0.7)
    return [mix_shares.long_shares(MixedStreams(mix, 8, 64, seed=s), 20)[-1] for s in range(32)]


@pytest.mark.slow  # 48 runs of the long-and-short mix: with the 16-seed tests
def test_a_mix_of_long_and_short_documents_holds_its_weights_from_the_first_step(
    long_and_short, at_20
):
    mix = mix_shares.mix_of(long_and_short, 0.7)
    means = [load_manifest(m.url).tokens / load_manifest(m.url).documents for m in mix]
    assert 5_000 < means[0] < 7_000 and 700 < means[1] < 1_100
    rows, tgt_len = 8, 64  # the tiny config's
    # The expected share at any step is the weight: at step 20 over 32 seeds (20 x 64 tokens a
    # row, a fifth of one long document; a run's share there strays by 6 to 9 points, sd).
    assert abs(np.mean(at_20) - 0.7) < 0.05, at_20
    # And with the weights the other way round, 32 rows, at step 300: rows that started nearer
    # the weights than running rows stand (a walk of mean lengths) read 0.39 of the long corpus
    # there (0.37 to 0.42 over 16 seeds).
    other = mix_shares.mix_of(long_and_short, 0.3)
    at_300 = [mix_shares.long_shares(MixedStreams(other, 32, tgt_len, seed=s), 300)[-1]
              for s in range(4)]  # fmt: skip
    assert abs(np.mean(at_300) - 0.3) < 0.04, at_300
    stream = MixedStreams(mix, rows, tgt_len, seed=0)
    shares = mix_shares.long_shares(stream, 300)
    # The same after a resume at step 150 on another world size, batch for batch.
    halves = [MixedStreams(mix, rows // 2, tgt_len, rank=r, world_size=2, seed=0) for r in (0, 1)]
    for half in halves:
        list(itertools.islice(half, 150))
    state = halves[0].state_of([row for half in halves for row in half.row_states()])
    resumed = MixedStreams(mix, rows, tgt_len, seed=0)
    resumed.load_state_dict(state)
    assert mix_shares.long_shares(resumed, 150) == shares[150:]


@pytest.mark.slow
@pytest.mark.parametrize("weight", [0.3, 0.7])
def test_sixteen_runs_of_eight_rows_hold_the_weight_at_every_logged_step(long_and_short, weight):
    """The issue's measure: the mean over seeds 0-15 of the long corpus's share within 2 points
    of its weight at every 20th step to 1,000, 8 rows of 64. Rows choosing each by its own
    counts missed it (0.270 at step 140 at 0.3: a row's share strays by a document, and 2 or 3
    rows hold the articles); the group schedule holds it within 1.1 points (0.691 and 0.310)."""
    mix = mix_shares.mix_of(long_and_short, weight)
    runs = [mix_shares.long_shares(MixedStreams(mix, 8, 64, seed=s), 1000) for s in range(16)]
    means = np.mean(runs, axis=0)[19::20]
    assert np.abs(means - weight).max() < 0.02, means.round(3).tolist()


@pytest.mark.slow  # 48 runs of the long-and-short mix: with the 16-seed tests
def test_rows_that_start_where_a_token_stands_in_its_run_keep_a_runs_share_near_its_weight(
    long_and_short, at_20
):
    """The spread over seeds 0-15 of a run's share of the articles at step 20, a fifth of one
    article a row: 8 rows at 0.7, 0.067 (sd) when each row stood at a point of its first
    document of its own (spread phases; the mean missed 0.7 by 2.3 points), 0.014 with the rows
    ordered by the tokens of their runs left, every corpus's ending next to the other's
    beginning; 32 rows at 0.3, 0.023 and 0.004."""
    mix = mix_shares.mix_of(long_and_short, 0.3)
    at_20_of_32 = [mix_shares.long_shares(MixedStreams(mix, 32, 64, seed=s), 20)[-1]
                   for s in range(16)]  # fmt: skip
    for weight, shares, spread in ((0.7, at_20[:16], 0.03), (0.3, at_20_of_32, 0.012)):
        assert np.std(shares) < spread and abs(np.mean(shares) - weight) < 0.015, shares


def test_a_state_of_rows_drawn_by_hash_goes_on_in_the_document_each_row_stands_in(corpora):
    """Version 1 states (before the schedule): [document, epochs..., offsets...] per row, the
    document's corpus a hash of (seed, row, document)."""
    weights, rows = {"wiki": 0.7, "news": 0.3}, 4
    stream = MixedStreams(sources(corpora, weights), rows, 40, seed=9)
    refs = {n: Reference(corpora[n][0], corpora[n][1], rows) for n in weights}
    offsets = [[0, 0], [50, 0], [0, 35], [123, 77]]
    state = stream.state_dict() | {
        "version": 1,
        "step": 7,
        "rows": [[3, 0, 0, *o] for o in offsets],
    }
    stream.load_state_dict(state)
    x, _ = next(iter(stream))
    assert stream.state_dict()["version"] == 2 and stream.next_step == 8
    for g, row in enumerate(x.numpy()):
        corpus = stream.names[stream.schedule.corpus_at(9, g, 3)]
        position = offsets[g][stream.names.index(corpus)]
        document = refs[corpus].document(g, position)
        n = min(len(document), len(row))
        assert np.array_equal(row[:n], document[:n]), g
    read = stream.mix_tokens()
    assert sum(read.values()) == sum(map(sum, offsets)) + rows * 40


def test_too_few_steps_for_the_weights_are_named_before_training(long_and_short):
    mix = mix_shares.mix_of(long_and_short, 0.7)
    stream = MixedStreams(mix, 8, 64)
    settling = stream.schedule.settling_tokens()[0]
    assert stream.too_short(math.ceil(settling / 64)) is None
    warning = stream.too_short(settling // 64)
    assert warning.startswith(f"data.mix: {settling // 64 * 64:,} tokens per row planned (")
    assert "three mean documents of corpus long (" in warning and "\n" not in warning


def test_corpora_that_end_documents_with_different_tokens_are_refused_by_name(corpora, tmp_path):
    """One tokenizer, two end tokens (txl-prepare --eos-token): a model could not learn one."""
    shutil.copytree(corpora["news"][0], tmp_path / "news")
    manifest = tmp_path / "news" / "train" / "manifest.json"
    record = json.loads(manifest.read_text())
    assert record["eos_token"] == "<|endoftext|>"
    manifest.write_text(json.dumps(record | {"eos_token": "<|doc_end|>"}))
    mix = [*sources(corpora, {"wiki": 1}), MixSource("news", str(manifest), 1)]
    with pytest.raises(VocabMismatchError, match=r"^data\.mix: corpora wiki and news end docum"):
        MixedStreams(mix, 2, 10)


def test_the_walk_gets_the_lengths_of_the_documents_rows_read(corpora):
    """Every document once (the corpora hold fewer than LENGTH_SAMPLES samples), cut where the
    shares end, none past the last share: the pieces a row reads as documents."""
    rows = 4
    stream = MixedStreams(sources(corpora, {"wiki": 1, "news": 1}), rows, 40)
    for name, corpus in zip(stream.names, stream.corpora):
        assert len(corpus.table) <= LENGTH_SAMPLES
        ref = Reference(corpora[name][0], corpora[name][1], rows)
        read = rows * ref.share
        points = {0, *range(ref.share, read, ref.share), *(e for e in ref.ends if e < read), read}
        assert sorted(corpus.document_lengths()) == sorted(np.diff(sorted(points)).tolist())


def test_a_row_starts_with_its_starts_rest_of_a_document_of_its_share(corpora):
    """The row's first document is one of its share with at least the start's rest of tokens
    (from the walk's token the row stands for), read from that many before its end, with the
    walk's counts there; a document cut where the row's share ends counts to there."""
    rows, weights = 16, {"wiki": 0.5, "news": 0.5}
    refs = {name: Reference(*corpora[name], rows) for name in weights}
    for seed in range(3):
        stream = MixedStreams(sources(corpora, weights), rows, 40, seed=seed)
        starts = stream.schedule.starts(seed, rows)
        for g, (start, cursor) in enumerate(zip(starts, stream.cursors)):
            ref = refs[stream.names[start.corpus]]
            rest = ref.document(g, cursor.offsets[start.corpus])
            assert len(rest) == start.rest and cursor.counts == start.counts, (seed, g)
        assert len({s.rest for s in starts}) > rows // 2  # not all at a document's start
