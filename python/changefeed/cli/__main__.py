"""``python -m changefeed.cli``: the same as the ``changefeed`` script."""

import sys

from changefeed.cli import main

sys.exit(main())
