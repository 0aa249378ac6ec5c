import sys

from kilter.cli.main import main

sys.exit(main())
