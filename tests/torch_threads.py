"""One torch thread in the test process, for the folders whose tests compute there.

The suite's machines have two cores, shared with a test's children and often with other jobs:
torch's second thread then mostly waits for a core, and the suite's tensors are too
small to gain from it. On the shared 2-core VM (load 5-7) the not-slow tests of the folders
that opt in took 521 s, 204 s of CPU, with torch's default of two threads; 143 s, 81 s with one.
Children keep torch's default: the thread tests and the training runs choose their own. A folder
opts in by importing the fixture into its conftest.py.
"""

import pytest
import torch


@pytest.fixture(scope="session", autouse=True)
def one_torch_thread() -> None:
    """torch computes on one thread from the folder's first fixture on (session scope, so the
    folder's module- and session-scoped models are built that way too)."""
    torch.set_num_threads(1)
