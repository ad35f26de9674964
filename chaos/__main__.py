import sys

from chaos.run import main

sys.exit(main())
