# mmdebstrap --customize-hook: "$1" is the new root.  Lines starting with # are not part of the hook.
# apt and dpkg leftovers that only take space
rm -rf "$1/var/lib/apt/lists/"* "$1/var/cache/apt/"*.bin "$1/var/log/"*.log
