import sys

from algosel.cli import main

sys.exit(main())
