"""``python -m warpspec.cli``: the ``warpspec`` command, for a checkout that is not installed."""

import sys

from warpspec.cli import main

sys.exit(main())
