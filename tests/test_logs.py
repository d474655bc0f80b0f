import logging

import pytest

from txl_dist.logs import (
    DEEPSPEED_LOGGER,
    OUR_LOGGERS,
    configure_logging,
    libraries_quiet,
    ranks,
)


@pytest.fixture(autouse=True)
def restore_our_loggers():
    saved = {
        n: (lg.handlers, lg.level, lg.propagate, lg.filters[:])
        for n in (*OUR_LOGGERS, DEEPSPEED_LOGGER)
        if (lg := logging.getLogger(n))
    }
    yield
    for name, (handlers, level, propagate, filters) in saved.items():
        logger = logging.getLogger(name)
        logger.handlers, logger.level, logger.propagate = handlers, level, propagate
        logger.filters = filters


def test_rank_0_tells_the_story_on_stdout_and_warnings_go_to_stderr(capsys):
    configure_logging(is_main=True)
    logging.getLogger("txl_dist.engine.train").info("saved checkpoint")
    logging.getLogger("data_pipeline.streams").warning("slow shard")
    out, err = capsys.readouterr()
    assert out == "[txl-dist] saved checkpoint\n"
    assert err == "[txl-dist] slow shard\n"


def test_other_ranks_report_only_warnings(capsys):
    configure_logging(is_main=False)
    logging.getLogger("txl_dist.engine.train").info("saved checkpoint")
    logging.getLogger("txl_dist.engine.metrics").warning("wandb disabled")
    assert capsys.readouterr() == ("", "[txl-dist] wandb disabled\n")


def test_libraries_loggers_are_left_alone():
    before = logging.getLogger("fsspec").level, logging.getLogger().handlers[:]
    configure_logging(is_main=True)
    assert (logging.getLogger("fsspec").level, logging.getLogger().handlers) == before


def test_deepspeed_keeps_to_errors_unless_verbose(caplog):
    from deepspeed.utils import logger as deepspeed  # the logger of DeepSpeed's console lines

    assert deepspeed is logging.getLogger(DEEPSPEED_LOGGER)
    deepspeed.addHandler(caplog.handler)
    configure_logging(is_main=True)
    deepspeed.warning("Setting accelerator to CPU")
    deepspeed.error("a real problem")
    assert [r.getMessage() for r in caplog.records] == ["a real problem"]
    assert libraries_quiet()  # wandb's runs start quiet too
    caplog.clear()
    configure_logging(is_main=True, verbose=True)
    deepspeed.warning("Setting accelerator to CPU")
    assert [r.getMessage() for r in caplog.records] == ["Setting accelerator to CPU"]
    assert not libraries_quiet()


def test_one_rank_is_one_rank():
    assert [ranks(n) for n in (1, 2, 16)] == ["1 rank", "2 ranks", "16 ranks"]
