# nvidia-compute-utils: the system user the persistence daemon drops to (--user nvidia-persistenced)
if [ "$1" = "configure" ] && ! getent passwd nvidia-persistenced >/dev/null; then
    adduser --system --quiet --group --no-create-home --home /nonexistent \
        --gecos "NVIDIA Persistence Daemon" nvidia-persistenced
fi
