# shellcheck shell=bash
# The session wrapper: what a call in a session runs (`bash -c "$(cat session_wrapper.sh)"`).
# See app/sessions/service.py for what a session keeps. This script
#   1. restores the snapshot (sourced with stdio on /dev/null, `expand_aliases` on);
#   2. lays the call's own env over it, then runs the user's command with `eval`, the command
#      text arriving in an environment variable (never spliced into shell text);
#   3. on EXIT (a trap, so `exit 3` still saves; the exit status is kept) writes the exported
#      variables that differ from the environment the shell started with, every function and
#      every alias, to a file the server renames over the snapshot.
# Its own names start with `__shellgate_` (shell variables and functions, skipped when saving)
# or `__SHELLGATE_` (the environment it receives). Inputs: __SHELLGATE_COMMAND,
# __SHELLGATE_STATE (snapshot to restore), __SHELLGATE_SAVE_TO (where to write the new state;
# absent for a call that does not save), __SHELLGATE_SCRATCH (the owning call's own file,
# emptied by the server after the call), __SHELLGATE_CALL_KEYS and __SHELLGATE_CALL_<name>
# (the call's own env, applied after the restore), __SHELLGATE_CWD_TO (a `keep_cwd` session's
# owning call: where its EXIT trap writes the directory it ended in).
# What it costs is bash work per exported variable, so the common case skips it: a call that
# does not save does no bookkeeping at all, and a saving call first compares `declare -px`
# (every exported variable and its value) before and after the command. Equal — the command
# exported, changed and unset nothing — means the snapshot's `export`/`unset` lines stay as they
# were. Only otherwise is every exported variable compared with the environment the shell
# started with (read back from /proc/$$/environ, the process's initial environment, which bash
# never rewrites). Listings go through the scratch file: `$(…)` would fork a subshell, which
# costs more than the rest of the wrapper.
# Variables that describe one process, never the session, are neither saved nor unset: PWD
# OLDPWD SHLVL _ SHELLOPTS BASHOPTS BASH_ENV SHELLGATE_EXECUTION_ID (both `case` lines below).
shopt -s expand_aliases
declare -A __shellgate_before=() __shellgate_call=()
declare -a __shellgate_kept=() __shellgate_exports=() __shellgate_start=()
# shellcheck disable=SC2153  # the __SHELLGATE_ inputs come from the environment
__shellgate_scratch=$__SHELLGATE_SCRATCH
__shellgate_save_to=${__SHELLGATE_SAVE_TO-}
__shellgate_cwd_to=${__SHELLGATE_CWD_TO-}
if [[ -n ${__SHELLGATE_STATE-} && -r $__SHELLGATE_STATE ]]; then
  # shellcheck source=/dev/null  # the snapshot this wrapper wrote on an earlier call
  source "$__SHELLGATE_STATE" </dev/null >/dev/null 2>&1
  # `builtin` from here on: the snapshot may define functions or aliases of these names.
  if [[ -n $__shellgate_save_to ]] && builtin mapfile -t __shellgate_kept <"$__SHELLGATE_STATE"; then
    # The snapshot starts with its variables, one line each (`printf %q` quotes newlines).
    for __shellgate_name in "${__shellgate_kept[@]}"; do
      case $__shellgate_name in 'export '* | 'unset -v '*) ;; *) break ;; esac
      __shellgate_exports+=("$__shellgate_name")
    done
  fi
fi
# Read before the call's env is applied: no name of it may stand in for the wrapper's own
# (the server refuses such names; this keeps the wrapper safe on its own).
# shellcheck disable=SC2153
__shellgate_command=$__SHELLGATE_COMMAND
for __shellgate_name in ${__SHELLGATE_CALL_KEYS-}; do
  case $__shellgate_name in __SHELLGATE_* | __shellgate_*) continue ;; esac
  __shellgate_value=__SHELLGATE_CALL_$__shellgate_name
  if [[ -v $__shellgate_name ]]; then
    __shellgate_before[$__shellgate_name]=${!__shellgate_name}
  fi
  __shellgate_call[$__shellgate_name]=${!__shellgate_value}
  export "$__shellgate_name=${!__shellgate_value}"
  unset -v "$__shellgate_value"
done
unset -v __SHELLGATE_COMMAND __SHELLGATE_SAVE_TO __SHELLGATE_STATE __SHELLGATE_CALL_KEYS \
  __SHELLGATE_SCRATCH __SHELLGATE_CWD_TO __shellgate_name __shellgate_value __shellgate_kept
if [[ -n $__shellgate_save_to ]] && builtin declare -px >"$__shellgate_scratch"; then
  builtin mapfile -t __shellgate_start <"$__shellgate_scratch"
fi
__shellgate_save() {
  builtin unset -f __shellgate_save  # so that `declare -f` below lists the user's only
  set +e +u +o pipefail
  local IFS=$' \t\n' name value state entry
  local -a names=() now=()
  local -A exported=() base=()
  builtin umask 077
  builtin declare -px >"$__shellgate_scratch" && builtin mapfile -t now <"$__shellgate_scratch"
  {
    IFS=$'\n'  # the listings compare line for line, as the file was
    if [[ ${#now[@]} -gt 0 && ${#now[@]} -eq ${#__shellgate_start[@]} &&
      "${now[*]}" == "${__shellgate_start[*]}" ]]; then
      IFS=$' \t\n'
      if ((${#__shellgate_exports[@]})); then
        builtin printf '%s\n' "${__shellgate_exports[@]}"
      fi
    else
      IFS=$' \t\n'
      if builtin mapfile -d '' -t names </proc/$$/environ; then
        for entry in "${names[@]}"; do
          name=${entry%%=*}
          # Entries bash does not import as variables (`a-b=1`, exported functions).
          case $name in '' | [0-9]* | *[!A-Za-z0-9_]*) continue ;; esac
          base[$name]=${entry#*=}
        done
      fi
      names=()
      builtin compgen -e >"$__shellgate_scratch" && builtin mapfile -t names <"$__shellgate_scratch"
      for name in "${names[@]}"; do
        case $name in PWD|OLDPWD|SHLVL|_|SHELLOPTS|BASHOPTS|BASH_ENV|SHELLGATE_EXECUTION_ID|__SHELLGATE_*|__shellgate_*) continue ;; esac
        exported[$name]=1
        value=${!name}
        state='set'
        # A per-call value the command left alone goes back to what it was before the call.
        if [[ -v __shellgate_call[$name] && $value == "${__shellgate_call[$name]}" ]]; then
          if [[ -v __shellgate_before[$name] ]]; then
            value=${__shellgate_before[$name]}
          else
            state='unset'
          fi
        fi
        if [[ $state == set ]]; then
          if [[ ! -v base[$name] || ${base[$name]} != "$value" ]]; then
            builtin printf 'export %s=%q\n' "$name" "$value"
          fi
        elif [[ -v base[$name] ]]; then
          builtin printf 'unset -v %s\n' "$name"
        fi
      done
      for name in "${!base[@]}"; do
        case $name in PWD|OLDPWD|SHLVL|_|SHELLOPTS|BASHOPTS|BASH_ENV|SHELLGATE_EXECUTION_ID|__SHELLGATE_*|__shellgate_*) continue ;; esac
        [[ -v exported[$name] ]] && continue
        # Read-only names the shell never imported (UID, EUID, PPID) cannot be unset anyway.
        [[ ${!name@a} == *r* ]] && continue
        builtin printf 'unset -v %s\n' "$name"
      done
    fi
    builtin declare -f
    builtin alias -p
    # Last: the server installs only a snapshot that ends with this line (app/sessions/snapshot.py).
    builtin printf "# end of the session's snapshot\n"
  } >"$__shellgate_save_to"
}
__shellgate_exit() {
  local status=$?
  builtin trap - EXIT
  if [[ -n $__shellgate_save_to ]]; then
    builtin unset -f __shellgate_exit
    __shellgate_save 2>/dev/null
    if [[ -n $__shellgate_cwd_to ]]; then
      builtin printf '%s' "$PWD" 2>/dev/null >"$__shellgate_cwd_to"
    fi
  fi
  builtin exit "$status"
}
trap __shellgate_exit EXIT
eval "$__shellgate_command"
