"""The tests here compute in the test process: on one torch thread (tests/torch_threads.py)."""

from tests.torch_threads import one_torch_thread  # noqa: F401 (an autouse fixture)
