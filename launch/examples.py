"""The inputs the documentation's examples read, made from WikiText-103's text (the standard
library, PyYAML and txl_dist.files), so that the README's Commands table runs top to bottom in a
fresh checkout:

    python launch/examples.py corpus ../shared/data/wikitext-103/wiki.train.tokens runs/corpus
    python launch/examples.py tasks ../shared/data/wikitext-103/wiki.valid.tokens runs/tasks

corpus: the file's articles as JSONL records ({"text": article}), OUT/train.jsonl and the last 10
in OUT/valid.jsonl, your own corpus for txl-prepare --dataset jsonl (docs/own-corpora.md).

tasks: two lm-evaluation-harness tasks for txl-eval --tasks --include-path OUT
(docs/evaluation.md): wt103_valid, the perplexity of the file's first 40 lines as one document,
and wt103_last_word, the last word of each paragraph's first 30 words given the rest; each a
task file (OUT/NAME.yaml, its data at OUT/NAME.jsonl as given, so run from where the harness
will).

Every file is created anew, never written through a link someone planted where it goes
(txl_dist.files), and the data's path is written into a task file as a quoted YAML string (a
path holding " #" or ": " reads back whole).
"""

from __future__ import annotations

import argparse
import json
import os
import re

import yaml

from txl_dist.files import open_new

# An article starts at a " = Title = " line between blank ones (a " = = Section = = " does not).
ARTICLE_START = re.compile(r"(?m)^ \n(?= = [^=].*[^=] = \n \n)")
VALID_ARTICLES = 10
TASK_LINES = 40
PASSAGE_WORDS = 30

PERPLEXITY_TASK = """\
task: wt103_valid
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
test_split: test
output_type: loglikelihood_rolling
doc_to_text: ""
doc_to_target: "{{{{text}}}}"
metric_list:
  - metric: word_perplexity
"""

LAST_WORD_TASK = """\
task: wt103_last_word
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
test_split: test
output_type: loglikelihood
doc_to_text: "{{{{text.split(' ')[:-1]|join(' ')}}}}"
doc_to_target: "{{{{' '+text.split(' ')[-1]}}}}"
metric_list:
  - metric: acc
    aggregation: mean
    higher_is_better: true
"""


def write_jsonl(path: str, texts: list[str]) -> None:
    with open_new(path, "w") as f:
        f.writelines(json.dumps({"text": text}) + "\n" for text in texts)


def corpus(source: str, out: str) -> None:
    """The articles of ``source``: train, and the last VALID_ARTICLES as valid."""
    with open(source, encoding="utf-8") as f:
        articles = [a for a in ARTICLE_START.split(f.read()) if a.strip()]
    os.makedirs(out, exist_ok=True)
    write_jsonl(f"{out}/train.jsonl", articles[:-VALID_ARTICLES])
    write_jsonl(f"{out}/valid.jsonl", articles[-VALID_ARTICLES:])


def tasks(source: str, out: str) -> None:
    """The two tasks over the first TASK_LINES lines of ``source``."""
    with open(source, encoding="utf-8") as f:
        lines = f.read().splitlines()[:TASK_LINES]
    os.makedirs(out, exist_ok=True)
    write_jsonl(f"{out}/wt103_valid.jsonl", ["".join(line + "\n" for line in lines)])
    passages = [
        " ".join(line.split()[:PASSAGE_WORDS])
        for line in lines
        if line.strip() and not line.startswith(" =")  # paragraphs, not headings
    ]
    write_jsonl(f"{out}/wt103_last_word.jsonl", passages)
    for name, task in (("wt103_valid", PERPLEXITY_TASK), ("wt103_last_word", LAST_WORD_TASK)):
        with open_new(f"{out}/{name}.yaml", "w") as f:
            f.write(task.format(data=quoted(f"{out}/{name}.jsonl")))


def quoted(text: str) -> str:
    """``text`` as one double-quoted YAML scalar (ASCII, escapes for the rest), on one line."""
    return yaml.safe_dump(text, default_style='"', width=float("inf")).strip()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0].replace("\n", " "))
    p.add_argument("what", choices=("corpus", "tasks"))
    p.add_argument("source", help="a WikiText-103 file (wiki.train.tokens, wiki.valid.tokens)")
    p.add_argument("out", help="the folder to write")
    args = p.parse_args()
    {"corpus": corpus, "tasks": tasks}[args.what](args.source, args.out)


if __name__ == "__main__":
    main()
