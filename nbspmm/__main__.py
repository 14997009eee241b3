import sys

from nbspmm.cli import main

sys.exit(main())
