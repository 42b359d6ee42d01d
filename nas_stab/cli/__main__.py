"""`python -m nas_stab.cli`: the `nas-stab` command."""
import sys

from nas_stab.cli import main

sys.exit(main())
