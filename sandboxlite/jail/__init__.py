"""A sandbox's life: host facts, the plan, the launch, talking to the executor, and the objects
users hold (``Sandbox``, ``Shell``, ``SandboxPool``).

    host      host facts, found once, as a value (``Host.detect()``)
    plan      every decision of a sandbox's start, as a pure function of config and host facts
    launch    carry out a plan: spawn bwrap, boot the executor, tear the jail down (``Jail``)
    cmdio     one spawned command's pipes and frames, driven by poll(2)
    transfer  files between the host and a sandbox, on descriptors the executor opened inside
    sandbox   ``Sandbox``: one living jail and what you do with it
    shell     ``Shell``: a persistent bash session in a sandbox
    pool      ``SandboxPool``: sandboxes kept warm for many short episodes

A start goes plan -> launch -> (executor) -> sandbox; snapshots and forks come from the state
room, images from the images room.

May import: errors, result, paths, config, isolation, network, executor, images, state.
"""
