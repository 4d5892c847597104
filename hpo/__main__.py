"""``python -m hpo``: the ``hpo`` command line."""

import sys

from hpo.cli import main

sys.exit(main())
