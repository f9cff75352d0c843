"""``python -m jitsched.cli``."""

import sys

from jitsched.cli import main

sys.exit(main())
