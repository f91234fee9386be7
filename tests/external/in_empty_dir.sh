#!/usr/bin/env bash
# in_empty_dir.sh CODE PATTERN COMMAND...: expect_exit.sh run from a fresh
# empty folder, which must still be empty afterwards: for a command that
# must store nothing (no corpus/, no .kprop/findings/).
here=$(cd "$(dirname "$0")" && pwd)
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cd "$dir" || exit 1
bash "$here/expect_exit.sh" "$@" || exit 1
left=$(find . -mindepth 1 | head -5)
[ -z "$left" ] || { echo "in_empty_dir: the command left files behind: $left"; exit 1; }
