"""Isolation primitives: each one thing the kernel can take away from a sandbox, and the host
facts it depends on.  None of them starts a jail; ``jail.plan`` decides which to use and
``jail.launch`` applies them.

    seccomp            the syscall filter every sandbox runs under (pyseccomp)
    landlock           isolation without namespaces: what a Landlock sandbox may touch
    cgroups            per-sandbox memory and pids limits, where the caller can use cgroups
    idmap              idmapped images: the image's owner shown as a sandbox's own host uid
    slots              one host uid per live sandbox (root callers), leased from a range
    identity           who the jails run as on the host, and whether that uid reaches a path
    devnodes           a ready-made /dev for root callers' sandboxes
    bwrap              the bwrap on this host: where it is, its version and features
    containers         the container runtime this process runs in, and what stops a jail there
    container_profile  a seccomp profile for the container sandboxlite runs in

May import: errors.
"""
