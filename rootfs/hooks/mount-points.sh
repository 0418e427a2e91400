# mmdebstrap --customize-hook: "$1" is the new root.  Lines starting with # are not part of the hook.
# mount points the jail needs, present in the image itself
mkdir -p "$1/testbed/input" "$1/testbed/output" "$1/proc" "$1/dev" "$1/tmp" "$1/root"
