import math

from txl_dist.evaluation.loop import EvalResult, token_weighted
from txl_dist.evaluation.records import eval_line, log_evaluation


def test_eval_line_shows_bpc_for_char_level_records():
    evaluated = dict(split="valid", step=7, loss=0.7, bpc=1.0099, tokens=5, tokens_per_s=1.0)
    assert "| loss 0.7000 | bpc 1.0099 |" in eval_line(evaluated)


def test_a_mix_logs_each_corpus_then_their_mean_with_the_levels_score():
    wiki, news = EvalResult(2.0, 7.39, 300, 1.0), EvalResult(3.0, 20.1, 100, 1.0)
    logged = []
    log_evaluation(
        lambda record, line: logged.append((record, line)),
        step=9,
        split="valid",
        result=token_weighted({"wiki": wiki, "news": news}),
        level="char",
    )
    records = [record for record, _ in logged]
    assert [r.get("corpus") for r in records] == ["wiki", "news", None]
    mean = records[-1]
    assert mean["loss"] == 2.25 and mean["tokens"] == 400 and mean["tokens_per_s"] == 200
    assert abs(mean["bpc"] - 2.25 / math.log(2)) < 1e-12 and "ppl" not in mean
    assert logged[0][1].startswith("eval valid wiki step 9 | loss 2.0000 | bpc ")
