"""`python -m instrument.launch`."""

import sys

from instrument.launch import main

sys.exit(main())
