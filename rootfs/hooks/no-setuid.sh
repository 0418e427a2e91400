# mmdebstrap --customize-hook: "$1" is the new root.  Lines starting with # are not part of the hook.
# no setuid/setgid programs: nothing in a sandbox may gain privileges
find "$1" -xdev -type f -perm /6000 -exec chmod ug-s {} +
