"""``python -m changefeed.demo``: what ``make demo`` runs."""

import sys

from changefeed.demo import main

sys.exit(main())
