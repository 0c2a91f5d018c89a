#!/usr/bin/env bash
# Install the zarrfs@.service template and /etc/zarrfs/ (docs/systemd.md).
#   bash scripts/install_systemd.sh                  as root, into / (then systemctl daemon-reload)
#   bash scripts/install_systemd.sh --root DIR       into a staging tree (packaging, tests)
#   bash scripts/install_systemd.sh --zarrfs PATH    the zarrfs executable ExecStart= runs
#                                                    (default /usr/local/bin/zarrfs, which
#                                                    scripts/setup.sh links when run as root)
# It installs DIR/etc/systemd/system/zarrfs@.service with that path substituted and
# DIR/etc/zarrfs/zarrfs.conf.example; existing /etc/zarrfs/*.conf files are never touched. The
# example .mount/.automount units in systemd/ are templates to copy and edit, not installed.
set -euo pipefail
cd "$(dirname "$0")/.."

root=/
zarrfs=/usr/local/bin/zarrfs
while (($#)); do
    case "$1" in
        --root) root="$2"; shift 2 ;;
        --zarrfs) zarrfs="$2"; shift 2 ;;
        *) echo "install_systemd: unknown argument $1" >&2; exit 2 ;;
    esac
done
if [[ "$zarrfs" != /* ]]; then
    echo "install_systemd: --zarrfs needs an absolute path, not $zarrfs" >&2
    exit 2
fi
if [[ ! -x "$zarrfs" ]]; then
    echo "install_systemd: warning: $zarrfs is not executable yet (run scripts/setup.sh as root)" >&2
fi

units="$root/etc/systemd/system"
install -d -m 755 "$units" "$root/etc/zarrfs"
sed "s#/usr/local/bin/zarrfs#${zarrfs}#g" systemd/zarrfs@.service > "$units/zarrfs@.service.tmp"
chmod 644 "$units/zarrfs@.service.tmp"
mv "$units/zarrfs@.service.tmp" "$units/zarrfs@.service"
install -m 644 systemd/zarrfs.conf.example "$root/etc/zarrfs/zarrfs.conf.example"
echo "install_systemd: installed $units/zarrfs@.service (ExecStart=$zarrfs)" >&2

if [[ "$root" == / && -d /run/systemd/system ]]; then
    systemctl daemon-reload
fi
echo "install_systemd: next: write /etc/zarrfs/NAME.conf, then systemctl enable --now zarrfs@NAME" >&2
