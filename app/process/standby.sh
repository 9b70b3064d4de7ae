# shellcheck shell=bash
# A shell started ahead of its command (app/process/standby.py). It joins its execution's
# cgroups now, while nobody waits for it, then waits for a spec and execs the command in
# place, so the command starts inside its cgroups without being moved there.
#
#   bash --noprofile --norc standby.sh STATUS_FD reset|keep SPEC_FD FILE_FDS
#
# In a sandbox, standby_enter.sh joins the cgroups and enters the sandbox first, then runs this
# script's text (its path may be out of the sandbox's sight, under /tmp) with the same arguments.
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
