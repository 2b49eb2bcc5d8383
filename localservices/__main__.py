"""``python -m localservices up|down|status``."""

import sys

from localservices import main

sys.exit(main())
