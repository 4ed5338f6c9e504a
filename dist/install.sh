#!/usr/bin/env bash
# Installs haul from this unpacked release into PREFIX (default /usr/local):
#   PREFIX/bin/haul
#   PREFIX/share/man/man1/haul.1
#   PREFIX/share/bash-completion/completions/haul
#   PREFIX/share/zsh/site-functions/_haul
#   PREFIX/share/fish/vendor_completions.d/haul.fish
#   PREFIX/lib/systemd/system/haul-worker.service   (a system service)
#   PREFIX/lib/systemd/user/haul-daemon.service     (a user service: `systemctl --user`)
# The units' ExecStart names PREFIX/bin/haul. Running it again installs the same files again.
#
# Every file is first written beside its destination under a temporary name, and renamed over it only once all of
# them are written: a failure (a full disk, a directory not writable) leaves what was installed before as it was.
set -euo pipefail

usage="usage: install.sh [PREFIX]   (default /usr/local; e.g. sudo ./install.sh /usr/local)"
fail() {
    echo "install.sh: $*" >&2
    exit 1
}

case "${1:-}" in
-h | --help)
    echo "$usage"
    exit 0
    ;;
esac
(($# <= 1)) || fail "one PREFIX at most, got $#: $*"$'\n'"$usage"
prefix=${1:-/usr/local}
# The units name the binary by its path; systemd needs it absolute, and reads spaces, quotes, `%` and `$` in it as
# syntax of its own.
[[ $prefix == /* ]] || fail "PREFIX must be an absolute path, not '$prefix' (e.g. /usr/local, or \$HOME/.local)"
[[ $prefix =~ ^[A-Za-z0-9._+@:,~/-]+$ ]] ||
    fail "PREFIX '$prefix' has characters a systemd unit would misread; choose one of letters, digits and ._+@:,~/-"
prefix=${prefix%/}
[[ -n $prefix ]] || fail "PREFIX / would install into /bin and /share; use /usr or /usr/local"

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# Source in this release, destination under PREFIX, mode. The release is laid out as the installed tree.
files=(
    "bin/haul 0755"
    "share/man/man1/haul.1 0644"
    "share/bash-completion/completions/haul 0644"
    "share/zsh/site-functions/_haul 0644"
    "share/fish/vendor_completions.d/haul.fish 0644"
    "lib/systemd/system/haul-worker.service 0644"
    "lib/systemd/user/haul-daemon.service 0644"
)
for entry in "${files[@]}"; do
    path=${entry% *}
    [[ -f $here/$path && -s $here/$path ]] || fail "$here/$path is missing or empty: unpack the whole release again"
done

temporaries=()
cleanup() {
    ((${#temporaries[@]} == 0)) || rm -f -- "${temporaries[@]}"
}
trap cleanup EXIT

# Directories first: a destination that cannot be had stops the install before anything is copied.
for entry in "${files[@]}"; do
    destination=$prefix/${entry% *}
    directory=$(dirname "$destination")
    error=$(mkdir -p -- "$directory" 2>&1) || fail "cannot create $directory: ${error##*: }"
    [[ ! -d $destination ]] || fail "$destination is a directory; move it away first"
done
for entry in "${files[@]}"; do
    path=${entry% *}
    mode=${entry#* }
    directory=$(dirname "$prefix/$path")
    temporary=$(mktemp "$directory/.$(basename "$path").install.XXXXXX" 2>&1) ||
        fail "cannot write in $directory: ${temporary##*: } (as a user who may write there? e.g. with sudo)"
    temporaries+=("$temporary")
    if [[ $path == lib/systemd/* ]]; then
        sed "s|^ExecStart=/usr/local/bin/haul\\b|ExecStart=$prefix/bin/haul|" "$here/$path" >"$temporary" ||
            fail "cannot write $temporary"
        grep -q "^ExecStart=$prefix/bin/haul " "$temporary" ||
            fail "$here/$path has no ExecStart=/usr/local/bin/haul to point at $prefix/bin/haul"
    else
        cp -- "$here/$path" "$temporary" || fail "cannot write $temporary"
    fi
    chmod "$mode" "$temporary" || fail "cannot set mode $mode on $temporary"
done

# Every file is written: now each takes its place (a rename within its directory).
for index in "${!files[@]}"; do
    path=${files[index]% *}
    mv -f -- "${temporaries[index]}" "$prefix/$path" || fail "cannot move ${temporaries[index]} to $prefix/$path"
done
temporaries=()

for entry in "${files[@]}"; do echo "installed $prefix/${entry% *}"; done
version=$("$prefix/bin/haul" --version) ||
    fail "$prefix/bin/haul is installed but does not run (is this release for $(uname -m) Linux, like this machine?)"
echo "$version"
case ":$PATH:" in
*":$prefix/bin:"*) ;;
*) echo "note: $prefix/bin is not on PATH" ;;
esac
echo "systemd: \`systemctl daemon-reload\` (then \`systemctl enable --now haul-worker\`), or"
echo "\`systemctl --user daemon-reload\` (then \`systemctl --user enable --now haul-daemon\`)."
