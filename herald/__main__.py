import sys

from herald.cli import main

sys.exit(main())
