"""`python -m app`: the `shellgate` program (app/entry.py).

`-m` puts the working directory first on `sys.path`, and the server's is often a workspace its
commands write: a module they drop there (`yaml.py`) would be imported, as the server, by the
next `import yaml`. Only `app` itself was meant to be found that way, and it has been by now."""

import os
import sys

if sys.path and sys.path[0] in ("", os.getcwd()):
    del sys.path[0]

from app.entry import main

main()
