#!/usr/bin/env bash
# Set up zarrfs on a Debian machine: system packages (as root) and a virtual environment in .venv.
#   bash scripts/setup.sh          runtime only
#   bash scripts/setup.sh --test   plus the test dependencies and tools, and the lint gates
set -euo pipefail
cd "$(dirname "$0")/.."

# apt's and pip's own chatter (debconf notices, build-backend notices, index warnings) goes to a
# log that is shown only when a step fails, so a user sees one line per step
log=$(mktemp)
build=""
trap 'rm -rf "$log" ${build:+"$build"}' EXIT
quiet() {
    if ! "$@" >"$log" 2>&1; then
        cat "$log" >&2
        echo "setup: failed: $*" >&2
        exit 1
    fi
}
pip_quiet() { quiet .venv/bin/python -m pip install -q "$@"; }

pkgs=(fuse3 libfuse3-dev pkg-config python3-venv attr libdeflate0)  # attr: getfattr/setfattr for the xattrs;
# libdeflate0: gzip chunks inflated into reused memory (zarrfs/core/codecs/gzip.py)
norec=()
extras=""
if [[ "${1:-}" == "--test" ]]; then
    pkgs+=(fio vim-tiny gdal-bin python3-gdal teem-apps libij-java default-jre xvfb xauth libtiff-tools)
    pkgs+=(systemd libseccomp2)  # systemd-analyze, the fstab generator; tests/systemd
    pkgs+=(netcdf-bin hdf5-tools)  # ncdump, h5dump: readers of group.nc (tests/views)
    pkgs+=(man-db groff-base zsh)  # man -l on docs/zarrfs.1; the zsh completion (tests/tools)
    pkgs+=(zip)  # zip -r x.zarr.zip x.zarr: a zipped folder (tests/interop/test_foreign_layouts.py)
    # Octave's ncread (netCDF-C) reads group.nc as MATLAB code would; its recommended
    # packages (GUI, docs) are not needed: about 75 MB and 40 s to install
    norec+=(octave-netcdf)
    extras="[test,dev]"
fi

missing=()
for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
missing_norec=()
for p in "${norec[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing_norec+=("$p")
done
if ((${#missing[@]} + ${#missing_norec[@]})); then
    echo "setup: installing ${missing[*]} ${missing_norec[*]}" >&2
    SUDO=""; [[ $(id -u) -ne 0 ]] && SUDO="sudo"
    quiet $SUDO apt-get update -qq
    if ((${#missing[@]})); then
        quiet $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"
    fi
    if ((${#missing_norec[@]})); then
        quiet $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
            --no-install-recommends "${missing_norec[@]}"
    fi
fi

if [[ ! -x .venv/bin/python ]]; then
    python3 -m venv .venv
fi
pip_quiet --upgrade pip
pip_quiet -e ".${extras}"
# pyfuse3 3.5.0 does not tell readdir which directory it reads when the kernel opens directories
# without asking; scripts/pyfuse3-readdir-inode.patch adds it (ReaddirToken.inode), which lets a
# read-only mount leave its listings in the kernel's cache. Nor does it let a file system raise
# the kernel's limit of background requests (12 by default, read-ahead dropped past 9);
# scripts/pyfuse3-max-background.patch adds Operations.max_background (README "Dependencies").
# And it holds the interpreter lock while the kernel copies a request in or a read reply out;
# scripts/pyfuse3-nogil-io.patch lets the engine's threads run meanwhile.
# Built once from the pinned sdist (Cython is pyfuse3's own build requirement); zarrfs works,
# listing and reading ahead as before, with a pyfuse3 that lacks them.
patched=3.5.0+zarrfs3
installed=$(.venv/bin/python -c 'import importlib.metadata as m; print(m.version("pyfuse3"))')
if [[ $installed != "$patched" ]]; then
    echo "setup: building pyfuse3 $patched (about a minute)" >&2
    build=$(mktemp -d)
    quiet .venv/bin/python -m pip download -q --no-deps --no-binary :all: -d "$build" pyfuse3==3.5.0
    tar -xzf "$build/pyfuse3-3.5.0.tar.gz" -C "$build"
    for name in readdir-inode max-background nogil-io; do
        quiet patch -d "$build/pyfuse3-3.5.0" -p1 --no-backup-if-mismatch \
            -i "$PWD/scripts/pyfuse3-$name.patch"
    done
    rm -f "$build/pyfuse3-3.5.0/src/pyfuse3/__init__.c"  # generated again from the patched source
    SETUPTOOLS_SCM_PRETEND_VERSION=$patched pip_quiet --no-deps "$build/pyfuse3-3.5.0"
fi
# fstab (type fuse.zarrfs, through mount.fuse3) and zarrfs@.service run `zarrfs` from root's
# PATH: as root, link this checkout's entry point there (a file that is not a link is kept)
if [[ $(id -u) -eq 0 ]]; then
    if [[ -L /usr/local/bin/zarrfs || ! -e /usr/local/bin/zarrfs ]]; then
        ln -sfn "$PWD/.venv/bin/zarrfs" /usr/local/bin/zarrfs
    else
        echo "setup: /usr/local/bin/zarrfs is not a symlink; left as it is" >&2
    fi
fi
# the zarrfs(1) page (docs/zarrfs.1, generated from the parsers) and the shell completions:
# system-wide as root, else in the user's XDG data directory
if [[ $(id -u) -eq 0 ]]; then
    man_dir=/usr/local/share/man/man1
    bash_dir=/usr/share/bash-completion/completions
    [[ -d $bash_dir ]] || bash_dir=/etc/bash_completion.d
    zsh_dir=/usr/local/share/zsh/site-functions
else
    data=${XDG_DATA_HOME:-$HOME/.local/share}
    man_dir=$data/man/man1 bash_dir=$data/bash-completion/completions zsh_dir=$data/zsh/site-functions
fi
mkdir -p "$man_dir" "$bash_dir" "$zsh_dir"
ln -sfn "$PWD/docs/zarrfs.1" "$man_dir/zarrfs.1"
.venv/bin/zarrfs completion bash > "$bash_dir/zarrfs"
.venv/bin/zarrfs completion zsh > "$zsh_dir/_zarrfs"
echo "setup: ready (.venv/bin/zarrfs; man zarrfs; completion for bash and zsh)" >&2
