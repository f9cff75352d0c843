"""``python -m jitsched``."""

import sys

from jitsched.cli import main

sys.exit(main())
