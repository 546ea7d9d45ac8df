"""`python -m app.cli`: the `anvil` command."""

import sys

from app.cli.main import main

sys.exit(main())
