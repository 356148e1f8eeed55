"""``python -m agentd``: the ``agentd`` command."""

import sys

from agentd.main import main

sys.exit(main())
