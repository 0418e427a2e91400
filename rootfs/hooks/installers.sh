# mmdebstrap --customize-hook: "$1" is the new root.  Lines starting with # are not part of the hook.
# a sandbox's root is copy-on-write and thrown away on reset: pip installs into it (no PEP 668
# "externally-managed-environment" refusal), and apt downloads as root (a sandbox maps no
# _apt user); the proxy comes from HTTP(S)_PROXY, set only under network="allow:..."
rm -f "$1"/usr/lib/python3*/EXTERNALLY-MANAGED && mkdir -p "$1/etc/apt/apt.conf.d" && echo 'APT::Sandbox::User "root";' > "$1/etc/apt/apt.conf.d/90sandboxlite"
