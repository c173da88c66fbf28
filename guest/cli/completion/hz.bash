# bash completion for hz, the tenant's CLI of the HarmonAIze device.
# Installed as share/bash-completion/completions/hz. Static: the lists below
# follow `hz --help`; tests/unit/cli/check_completion.py fails when a
# subcommand or option is missing here.

_hz() {
  COMPREPLY=()
  local cur=${COMP_WORDS[COMP_CWORD]} prev=
  ((COMP_CWORD > 0)) && prev=${COMP_WORDS[COMP_CWORD - 1]}
  local globals="--help --version --device --json"
  local -A subs=(
    [top]="status topology events checkpoint selftest"
    [checkpoint]="list policy save restore delete"
  )
  local -A opts=(
    [events]="--follow --topics --wait-ms --approve"
    [checkpoint list]="--stream"
    [checkpoint policy]="--stream --tier --retention"
    [checkpoint save]="--stream --step"
    [checkpoint restore]="--stream --step"
    [checkpoint delete]="--stream --step"
  )

  case $prev in
    --device) COMPREPLY=($(compgen -f -- "$cur")); return ;;
    --tier) COMPREPLY=($(compgen -W "host_memory local_disk peer_host" -- "$cur")); return ;;
    --topics) COMPREPLY=($(compgen -W "all failure maintenance preemption capacity congestion
               checkpoint negotiation hint energy" -- "$cur")); return ;;
  esac

  # The command path so far ("top" before any): the words that name
  # subcommands, skipping options and the values of those that take one.
  local path=top i word
  for ((i = 1; i < COMP_CWORD; i++)); do
    word=${COMP_WORDS[i]}
    case $word in
      --device) ((i++)) ;;
      -*) ;;
      *)
        if [[ -n ${subs[$path]+x} && " ${subs[$path]} " == *[[:space:]]$word[[:space:]]* ]]; then
          path=${path#top}; path="${path:+$path }$word"
        fi
        ;;
    esac
  done

  local words
  if [[ $cur == -* ]]; then
    words="${opts[$path]-} $globals"
  else
    words="${subs[$path]-}"
    # save and restore take a file.
    [[ $path == "checkpoint save" || $path == "checkpoint restore" ]] &&
      COMPREPLY=($(compgen -f -- "$cur"))
  fi
  COMPREPLY+=($(compgen -W "$words" -- "$cur"))
}

complete -F _hz hz
