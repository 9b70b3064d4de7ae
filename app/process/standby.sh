# shellcheck shell=bash
# A shell started ahead of its command (app/process/standby.py). It joins its execution's
# cgroups now, while nobody waits for it, then waits for a spec and execs the command in
# place, so the command starts inside its cgroups without being moved there.
#
#   bash --noprofile --norc standby.sh STATUS_FD reset|keep SPEC_FD FILE_FDS [SANDBOX...]
#
# SANDBOX: the argv of a sandbox (ending with bwrap's `--`) that the shell enters once in its
# cgroups, before it says `J`: its command then starts inside a sandbox already built. The
# shell execs it with the signals of __SHELLGATE_IGNORE ignored (bwrap must outlive a TERM to
# the group: app/sandbox/bwrap.py), which its own `trap ''` does without an `env` exec.
# `reset`: the command starts with every signal at its default (`env --default-signal`), not
# with what the server inherited ignored (app/process/signal_defaults.py).
# stdin: one line once the spec is in SPEC_FD, or EOF when the standby is dismissed.
# SPEC_FD: a memory file (memfd) the server fills before that line: no file is made on disk,
# so neither the environment's secrets nor an inode per command ever reach the data directory.
# FILE_FDS: more memory files (descriptor numbers, space-separated) the server may hand the
# command (a session's state: app/sessions/); closed before the exec unless the spec keeps them.
# STATUS_FD: `J` once joined; then a failed step's name (`spec`, `cwd`, `limits`), or `exec` and
# its close right before the exec (without `exec` the shell died before it: nothing ran). Any
# failure to join ends the shell before anything runs.
# The spec: NUL-terminated fields: cwd, the `ulimit` steps, 1 to keep FILE_FDS open for the
# command (else 0), the number N of environment entries, N entries `NAME=value`, then the argv.
status_fd=$1
spec_fd=$3
IFS=$'\n'
set -f
for cgroup_procs in ${__SHELLGATE_CGROUPS-}; do
  echo 0 >"$cgroup_procs" || exit 126
done
set +f
unset -v IFS __SHELLGATE_CGROUPS cgroup_procs
ignore=${__SHELLGATE_IGNORE-}
unset -v __SHELLGATE_IGNORE
if (($# > 4)); then
  # Inside the cgroups now: the rest is the sandbox to wait in (app/sandbox/bwrap.py), and
  # this script again, in there, which says `J` once the sandbox is built.
  # Its text, not its path: the path may be out of the sandbox's sight (under /tmp).
  IFS= read -r -d '' script <"$0"
  if [[ -n $ignore ]]; then
    # shellcheck disable=SC2086 # signal names, split on purpose
    trap '' $ignore
  fi
  exec "${@:5}" "$BASH" --noprofile --norc -c "$script" "$0" "$1" "$2" "$3" "$4"
fi
unset -v ignore
echo J >&"$status_fd"

IFS= read -r _ || exit 0
exec 0</dev/null
# A spec that cannot be read is the server's failure, not the command's: say so (the server
# then spawns the usual way) rather than exit as if the command had run. The server wrote it
# with pwrite, so the descriptor's offset is still 0.
if ! mapfile -d '' -t spec <&"$spec_fd" || [[ ! ${spec[3]-} =~ ^[0-9]+$ ]]; then
  echo spec >&"$status_fd"
  exit 126
fi
exec {spec_fd}<&-
count=${spec[3]}
environment=("${spec[@]:4:count}")
argv=("${spec[@]:4+count}")
if [[ ${spec[2]} != 1 ]]; then
  for file_fd in $4; do
    exec {file_fd}>&-
  done
fi
if ! builtin cd -- "${spec[0]}" 2>/dev/null; then
  echo cwd >&"$status_fd"
  exit 126
fi
if ! builtin eval "${spec[1]}" 2>/dev/null; then
  echo limits >&"$status_fd"
  exit 126
fi
signal_reset=()
if [[ ${2-} == reset ]]; then
  signal_reset=(--default-signal)
fi
echo exec >&"$status_fd"
exec {status_fd}>&-
exec /usr/bin/env -i "${signal_reset[@]}" -- "${environment[@]}" "${argv[@]}"
