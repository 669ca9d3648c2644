#!/usr/bin/env bash
# test_install.sh [BUILD]: `meson install` of BUILD (default build) into a temporary
# directory, then what a user gets from it: the binary runs, `man -M PREFIX/share/man
# ctrain` shows the page (every command in it), the CUDA backend sits where the
# binary looks for it (when the build has one), and the installed bash completion
# completes `ctrain fi<TAB>` to fit, `ctrain fit CFG optimizer.l<TAB>` to
# optimizer.lr= and export's `--on<TAB>` to --onnx (the zsh one is installed and
# parsed by zsh -n). Run by CI
# (.ci/run); exits 1 with the step that failed.
set -euo pipefail
build=${1:-build}
dest=$(mktemp -d)
trap 'rm -rf "$dest"' EXIT
fail() { echo "test_install: $*" >&2; exit 1; }

meson install -C "$build" --destdir "$dest" --quiet >/dev/null
prefix=$(meson introspect "$build" --buildoptions |
         python3 -c 'import json, sys; print(next(o["value"] for o in json.load(sys.stdin) if o["name"] == "prefix"))')
libdir=$(meson introspect "$build" --buildoptions |
         python3 -c 'import json, sys; print(next(o["value"] for o in json.load(sys.stdin) if o["name"] == "libdir"))')
root="$dest$prefix"
bin="$root/bin/ctrain"
[ -x "$bin" ] || fail "no $bin"
"$bin" version | grep -q '^ctrain ' || fail "the installed binary does not run"

page=$(MANWIDTH=100 man -P cat -M "$root/share/man" ctrain 2>/dev/null | col -b) ||
  fail "man -M $root/share/man ctrain failed"
for word in "ctrain fit" "ctrain eval" "ctrain predict" "ctrain summary" "ctrain inspect" \
            "ctrain export" "ctrain plot" "ctrain devices" "ctrain bench" "EXIT STATUS" "ENVIRONMENT" "EXAMPLES"; do
  grep -q "$word" <<<"$page" || fail "the man page lacks '$word'"
done

if grep -q 'CT_HAVE_CUDA 1' "$build/ct_build_config.h"; then
  [ -f "$root/$libdir/ctrain/libctrain-cuda.so" ] ||
    fail "libctrain-cuda.so is not in $prefix/$libdir/ctrain, where the binary looks"
fi

completion="$root/share/bash-completion/completions/ctrain"
[ -f "$root/share/zsh/site-functions/_ctrain" ] || fail "no zsh completion installed"
zsh -n "$root/share/zsh/site-functions/_ctrain" || fail "the zsh completion does not parse"
# Every command of `ctrain help` completes (and no other).
want=$("$bin" help | awk '/^Commands:/ {on = 1; next} on && /^  [a-z]/ {print $1} on && /^$/ {exit}' |
       sort -u | tr '\n' ' ')
got=$(bash -c 'source "$1"; COMP_WORDS=("$2" ""); COMP_CWORD=1; _ctrain; printf "%s\n" "${COMPREPLY[@]}"' \
      _ "$completion" "$bin" | sort | tr '\n' ' ')
[ "$got" = "$want" ] || fail "bash completes the commands '$got', but ctrain help lists '$want'"
got=$(bash -c 'source "$1"; COMP_WORDS=("$2" fi); COMP_CWORD=1; _ctrain; echo "${COMPREPLY[*]}"' \
      _ "$completion" "$bin")
[ "$got" = fit ] || fail "bash completes 'ctrain fi' to '$got', not 'fit'"
got=$(bash -c 'source "$1"; COMP_WORDS=("$2" fit configs/mlp.yaml optimizer.l); COMP_CWORD=3;
               _ctrain; echo "${COMPREPLY[*]}"' _ "$completion" "$bin")
[ "$got" = optimizer.lr= ] || fail "bash completes 'optimizer.l' to '$got', not 'optimizer.lr='"
got=$(bash -c 'source "$1"; COMP_WORDS=("$2" inspect --js); COMP_CWORD=2; _ctrain;
               echo "${COMPREPLY[*]}"' _ "$completion" "$bin")
[ "$got" = --json ] || fail "bash completes 'inspect --js' to '$got', not '--json'"
got=$(bash -c 'source "$1"; COMP_WORDS=("$2" export --checkpoint m.bin --on); COMP_CWORD=4;
               _ctrain; echo "${COMPREPLY[*]}"' _ "$completion" "$bin")
[ "$got" = --onnx ] || fail "bash completes 'export ... --on' to '$got', not '--onnx'"
got=$(bash -c 'source "$1"; COMP_WORDS=("$2" bench ""); COMP_CWORD=2; _ctrain;
               echo "${COMPREPLY[*]}"' _ "$completion" "$bin")
[ "$got" = matmul ] || fail "bash completes 'ctrain bench ' to '$got', not 'matmul'"
echo "test_install: ok (installed into a temporary $prefix: binary, man page, completions)"
