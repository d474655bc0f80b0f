"""``python -m data_pipeline``: txl-prepare without the console script (SLURM jobs, no install).

Not ``python -m data_pipeline.prepare``: the package imports that module, so runpy would run it a
second time as ``__main__`` (and warn).
"""

import sys

from data_pipeline.prepare import main

sys.exit(main())
