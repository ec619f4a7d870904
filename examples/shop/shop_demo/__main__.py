"""``python -m shop_demo``: what ``make demo`` runs."""

import sys

from shop_demo import main

sys.exit(main())
