# nvidia-persistenced (Debian): the user nvpd, then what dh_installsystemd adds (enable + start)
if [ "$1" = "configure" ]; then
    if ! getent passwd nvpd >/dev/null; then
        adduser --system --quiet --group --no-create-home --home /var/run/nvpd/ \
            --gecos "NVIDIA Persistence Daemon" nvpd
    fi
    if command -v systemctl >/dev/null 2>&1; then
        systemctl --quiet enable nvidia-persistenced.service >/dev/null 2>&1 || true
        if [ -d /run/systemd/system ]; then
            systemctl --system daemon-reload >/dev/null 2>&1 || true
            systemctl start nvidia-persistenced.service >/dev/null 2>&1 || true
        fi
    fi
fi
