"""Allow ``python -m kvoffload``."""

import sys

from kvoffload.cli import main

sys.exit(main())
