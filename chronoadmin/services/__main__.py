"""``python -m chronoadmin.services up|down|status``."""

import sys

from chronoadmin.services import main

sys.exit(main())
