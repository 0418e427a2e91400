# mmdebstrap --customize-hook: "$1" is the new root.  Lines starting with # are not part of the hook.
# matplotlib draws to files (Agg) and finds its font cache built (saves 150-200 ms on every
# `import matplotlib.pyplot`)
echo "backend: Agg" > "$1/etc/matplotlibrc" && chroot "$1" env HOME=/root MPLBACKEND=Agg python3 -c "import matplotlib.pyplot"
