"""``python -m sandboxlite.openenv.server [--host H] [--port P] [--sessions N] [--rootfs R]``."""

from .app import main

main()
