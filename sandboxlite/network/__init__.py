"""The network: what a sandbox may reach, and what may reach it.  Default deny: a sandbox has a
network namespace of its own with loopback only.

    netns    fresh network namespaces made ahead of time (root callers)
    policy   egress rules: which hosts ``network="allow:<rules>"`` lets through (presets: pypi, debian, ...)
    egress   the host side of an allow policy: an HTTP(S) proxy that checks each request against the rules
    ports    ports in: a host unix socket per exposed port (``SandboxConfig.expose``)
    relay    copying bytes both ways between two sockets (the proxy's tunnels, exposed ports)

May import: errors.
"""
