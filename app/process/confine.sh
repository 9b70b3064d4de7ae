# shellcheck shell=bash
# Sourced by bash (as BASH_ENV) before the command of a confined execution runs, in the same
# process: the shell joins the execution's cgroups, then lowers its resource limits. Any failure
# ends the shell (status 126) before the command runs: nothing runs unconfined by accident.
# Doing this here rather than between fork and exec lets the server spawn with vfork.
builtin unset -v BASH_ENV
if [[ -n ${__SHELLGATE_CGROUPS-} ]]; then
  __shellgate_ifs=$IFS
  IFS=$'\n'
  builtin set -f
  for __shellgate_path in $__SHELLGATE_CGROUPS; do
    if ! builtin echo "$$" >"$__shellgate_path"; then
      builtin echo "shellgate: could not join the cgroup $__shellgate_path" >&2
      builtin exit 126
    fi
  done
  builtin set +f
  IFS=$__shellgate_ifs
fi
if ! builtin eval "${__SHELLGATE_ULIMITS:-:}"; then
  builtin echo "shellgate: could not set the resource limits" >&2
  builtin exit 126
fi
builtin unset -v __SHELLGATE_CGROUPS __SHELLGATE_ULIMITS __shellgate_path __shellgate_ifs
