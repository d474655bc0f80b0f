"""``python -m data_pipeline``: txl-prepare without the console script (SLURM jobs, no install)."""

import sys

from data_pipeline.cli import main

sys.exit(main())
