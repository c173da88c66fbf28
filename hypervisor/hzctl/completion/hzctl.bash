# bash completion for hzctl, the operator CLI of harmonaized.
# Installed as share/bash-completion/completions/hzctl. Static: the lists
# below follow `hzctl --help`; tests/unit/cli/check_completion.py fails when
# a subcommand or option is missing here.

_hzctl() {
  COMPREPLY=()
  local cur=${COMP_WORDS[COMP_CWORD]} prev=
  ((COMP_CWORD > 0)) && prev=${COMP_WORDS[COMP_CWORD - 1]}
  local globals="--help --version --socket --json --timeout --on-host"
  local -A subs=(
    [top]="tenant vm comm counters event energy maintenance checkpoint status inventory
          allocations alloc release device negotiation cluster libvirt-hook upgrade"
    [tenant]="create features list remove domain"
    [vm]="bind unbind list attach detach"
    [comm]="list"
    [event]="inject status"
    [energy]="schedule status"
    [maintenance]="schedule status cancel complete"
    [checkpoint]="list"
    [device]="fail degrade repair"
    [negotiation]="list"
    [cluster]="status"
  )
  local -A opts=(
    [tenant create]="--weight --priority --max-regions --max-region-bytes --max-extents
                     --max-open-negotiations --disk-bytes --staging-bytes --features --latency-poll-us"
    [tenant features]="--features"
    [tenant remove]="--purge"
    [tenant domain]="--domain"
    [vm bind]="--tenant --socket --domain"
    [vm unbind]="--socket --domain"
    [vm attach]="--tenant --domain --socket"
    [vm detach]="--domain"
    [event inject]="--tenant --topic --kind --deadline-s --data"
    [event status]="--tenant"
    [energy schedule]="--window"
    [maintenance schedule]="--host --at --duration --vm"
    [maintenance status]="--host"
    [maintenance cancel]="--id --host"
    [maintenance complete]="--id --host"
    [checkpoint list]="--tenant"
    [allocations]="--spread"
    [alloc]="--tenant --gpus --nics --locality --this-host"
    [release]="--spread"
    [device fail]="--errors"
    [device degrade]="--errors"
    [upgrade]="--binary"
  )

  case $prev in
    -s | --socket | --binary) COMPREPLY=($(compgen -f -- "$cur")); return ;;
    --priority) COMPREPLY=($(compgen -W "low normal high" -- "$cur")); return ;;
    --locality) COMPREPLY=($(compgen -W "any host group" -- "$cur")); return ;;
    --features) COMPREPLY=($(compgen -W "all none collectives checkpoint events negotiation
                 topology hints inline-data energy" -- "$cur")); return ;;
    --topic) COMPREPLY=($(compgen -W "maintenance preemption failure capacity congestion
              checkpoint negotiation hint energy" -- "$cur")); return ;;
  esac

  # The command path so far ("top" before any): the words that name
  # subcommands, skipping options and the values of those that take one.
  local path=top i word
  for ((i = 1; i < COMP_CWORD; i++)); do
    word=${COMP_WORDS[i]}
    case $word in
      -s | --socket | --timeout | --on-host | --binary) ((i++)) ;;
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
  fi
  COMPREPLY=($(compgen -W "$words" -- "$cur"))
}

complete -F _hzctl hzctl
