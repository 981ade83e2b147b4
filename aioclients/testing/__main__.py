"""``python -m aioclients.testing serve [options]``: the local servers in one command.

The same as the ``aioclients-servers`` console script; ``serve --help`` lists the options.
"""

from __future__ import annotations

import sys

from aioclients.testing._servers import main

USAGE = (
    "usage: python -m aioclients.testing serve [options]\n"
    "  starts nats-server (JetStream) and the NSQ and Liftbridge emulators on the default\n"
    "  ports until Ctrl-C; `serve --help` lists the options (also: aioclients-servers)"
)

if __name__ == "__main__":
    if sys.argv[1:2] != ["serve"]:
        print(USAGE, file=sys.stderr)
        sys.exit(2)
    main(sys.argv[2:], prog="python -m aioclients.testing serve")
