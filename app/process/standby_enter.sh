# shellcheck shell=sh
# The first stage of a standby that waits in a sandbox (app/process/standby.py): it joins the
# execution's cgroups, so that the sandbox and everything in it start there and nothing is moved
# later, ignores the signals bwrap must outlive (the disposition survives the exec:
# app/sandbox/bwrap.py), then execs the sandbox, which runs the standby shell (standby.sh).
# POSIX sh, not bash: these three steps are all this process does, and /bin/sh (dash on Debian)
# starts for a fraction of what bash costs, once per command (bench/PROFILE.md).
#
#   sh standby_enter.sh SANDBOX... SHELL ARGS...
#
# __SHELLGATE_CGROUPS: the `cgroup.procs` files to join, one per line; a failure to join one
# ends this shell (status 126) before any sandbox exists. __SHELLGATE_IGNORE: signal names.
IFS='
'
set -f
for cgroup_procs in ${__SHELLGATE_CGROUPS-}; do
  echo 0 >"$cgroup_procs" || exit 126
done
set +f
unset IFS __SHELLGATE_CGROUPS cgroup_procs
if [ -n "${__SHELLGATE_IGNORE-}" ]; then
  # shellcheck disable=SC2086 # signal names, split on purpose
  trap '' $__SHELLGATE_IGNORE
fi
unset __SHELLGATE_IGNORE
exec "$@"
