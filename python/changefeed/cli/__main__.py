"""``python -m changefeed.cli``: the same as the ``changefeed`` script. ``spark-submit``
runs it as a file (docs/deploying.md, "Clusters"): ``spark-submit ... <this file> land
...``."""

import sys

if not __package__:
    # Run as a file, Python put this file's directory first on the path, where the CLI's
    # own modules (land, status, ...) would shadow any top-level module of those names.
    del sys.path[0]

from changefeed.cli import main

sys.exit(main())
