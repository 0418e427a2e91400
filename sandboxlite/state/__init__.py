"""State: a sandbox's filesystem kept to start others from.

    snapshot  ``Snapshot`` and the ``Store``: a sandbox's writes copied out as content-named,
              read-only layers (``sb.snapshot()``, ``Sandbox(snapshot=)``), and ``take`` which copies them
    archive   snapshots as files: export to and import from a checked tarball
    share     ``fork(n)``: sandboxes over another one's state, copied once or shared without a copy

What a sandbox is, is the jail room's; ``share`` asks of a sandbox and a pool only what it uses
(the ``Forked`` and ``Pool`` protocols), so it needs no import of them.

May import: errors, executor, images.
"""
