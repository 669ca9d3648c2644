# bash completion for ctrain (installed as share/bash-completion/completions/ctrain).
# Commands; each command's options, read from `ctrain help COMMAND` so that they are
# always the binary's; config keys after KEY= for fit and summary, from `ctrain help
# keys`; the values of a few options; files otherwise.

_ctrain() {
  local cur prev cword
  cur=${COMP_WORDS[COMP_CWORD]}
  prev=${COMP_WORDS[COMP_CWORD - 1]}
  cword=$COMP_CWORD
  local bin=${COMP_WORDS[0]}
  local commands="fit eval predict summary inspect export data plot devices bench help version"
  if ((cword == 1)); then
    COMPREPLY=($(compgen -W "$commands" -- "$cur"))
    return
  fi
  local cmd=${COMP_WORDS[1]}
  case $prev in
    --device) COMPREPLY=($(compgen -W "auto cpu cuda cuda:0 cuda:all cpu:2" -- "$cur")); return ;;
    --amp) COMPREPLY=($(compgen -W "off fp16 bf16" -- "$cur")); return ;;
    --graph) COMPREPLY=($(compgen -W "auto off" -- "$cur")); return ;;
    --cpu-loops) COMPREPLY=($(compgen -W "auto portable off" -- "$cur")); return ;;
    --cpu-bf16) COMPREPLY=($(compgen -W "auto native emulated" -- "$cur")); return ;;
    --cpu-winograd) COMPREPLY=($(compgen -W "auto off" -- "$cur")); return ;;
    --dtype) COMPREPLY=($(compgen -W "fp32 tf32 fp16 bf16" -- "$cur")); return ;;
    --out | -o | --output | --to) COMPREPLY=($(compgen -d -- "$cur")); return ;;
  esac
  if [[ $cmd == help ]]; then
    COMPREPLY=($(compgen -W "$commands keys" -- "$cur"))
    return
  fi
  if [[ $cmd == bench && $cword == 2 && $cur != -* ]]; then # the benchmark, not a file
    COMPREPLY=($(compgen -W "matmul" -- "$cur"))
    return
  fi
  if [[ $cmd == data && $cword == 2 && $cur != -* ]]; then # the data command's action
    COMPREPLY=($(compgen -W "export" -- "$cur"))
    return
  fi
  if [[ $cur == -* ]]; then
    local opts
    opts=$("$bin" help "$cmd" 2>/dev/null | grep -o -- '--[a-z][a-z-]*' | sort -u)
    COMPREPLY=($(compgen -W "$opts" -- "$cur"))
    return
  fi
  if [[ ($cmd == fit || $cmd == summary) && $cur != */* && $cword -gt 2 ]]; then
    local keys
    keys=$("$bin" help keys 2>/dev/null | awk '{print $1 "="}')
    COMPREPLY=($(compgen -W "$keys" -- "$cur"))
    if ((${#COMPREPLY[@]})); then
      compopt -o nospace 2>/dev/null
      return
    fi
  fi
  COMPREPLY=($(compgen -f -- "$cur"))
}
complete -F _ctrain ctrain
